"""Django settings for Infera, read from environment variables through strict helpers (see console/env.py).

Every value a person sets lives in an `INFERA_*` variable (or DATABASE_URL / REDIS_URL); a wrong one stops
start-up with a message naming the variable. Unset, everything points under var/ for the embedded demo.
"""

from __future__ import annotations

from pathlib import Path

from console.env import (
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_path,
    env_str,
    env_url,
    secret_from_file,
)
from console.settings_parts import (
    DATABASE_SCHEMES,
    REDIS_SCHEMES,
    channel_layer_settings,
    database_settings,
)

BASE_DIR = Path(__file__).resolve().parent.parent

# ---- Paths: the database, the secret key and the model store default to var/ ----
INFERA_VAR_DIR = env_path("INFERA_VAR_DIR", BASE_DIR / "var", base=BASE_DIR)
INFERA_MODEL_STORE = env_path("INFERA_MODEL_STORE", INFERA_VAR_DIR / "models", base=BASE_DIR)

# ---- Core ----
DEBUG = env_bool("INFERA_DEBUG", False)
SECRET_KEY = env_str("INFERA_SECRET_KEY") or secret_from_file(INFERA_VAR_DIR / "secret_key")
# /v2 and /metrics never reach Django, so this list guards the console, the API and WebSockets
ALLOWED_HOSTS = env_list("INFERA_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("INFERA_CSRF_TRUSTED_ORIGINS", [])

INFERA_MAX_UPLOAD_MB = env_int("INFERA_MAX_UPLOAD_MB", 512, minimum=1, maximum=1024 * 1024)
INFERA_MAX_UPLOAD_BYTES = INFERA_MAX_UPLOAD_MB * 1024 * 1024
# an archive may unpack to this much, in this many members (zip bombs and member floods stop here)
INFERA_MAX_UNPACKED_MB = env_int("INFERA_MAX_UNPACKED_MB", 4 * INFERA_MAX_UPLOAD_MB, minimum=1)
INFERA_MAX_ARCHIVE_MEMBERS = env_int("INFERA_MAX_ARCHIVE_MEMBERS", 10_000, minimum=1)
# the reconciler's period: how soon a replica that missed a change message converges anyway
INFERA_RECONCILE_SECONDS = env_int("INFERA_RECONCILE_SECONDS", 10, minimum=1, maximum=3600)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "console",
    "console.accounts",
    "console.monitoring",
    "console.registry",
    "drf_spectacular_sidecar",  # Swagger UI assets for /api/docs/, served locally
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "console.accounts.middleware.SecurityHeadersMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# ---- Data: DATABASE_URL (SQLite under var/ by default, PostgreSQL for replicas), REDIS_URL (channel layer) ----
DATABASES = {
    "default": database_settings(
        env_url("DATABASE_URL", DATABASE_SCHEMES), default_sqlite=INFERA_VAR_DIR / "infera.sqlite3"
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
CHANNEL_LAYERS = channel_layer_settings(env_url("REDIS_URL", REDIS_SCHEMES))

# ---- Accounts ----
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# ---- Web safety that holds on plain http too (issue "Users, roles and API tokens" extends this block) ----
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# ---- API ----
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Infera management API",
    "DESCRIPTION": "Models, versions, users and tokens of an Infera server. Inference itself is Triton's /v2.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

# ---- Static files: served by the ASGI process itself (console/static_serving.py), no collectstatic needed ----
STATIC_URL = "/static/"
STATIC_ROOT = INFERA_VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "console.static_serving.VendorFinder",
]

# ---- Time, language ----
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# ---- Logging ----
INFERA_LOG_LEVEL = env_choice("INFERA_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "engine": {"handlers": ["console"], "level": INFERA_LOG_LEVEL, "propagate": False},
        "console": {"handlers": ["console"], "level": INFERA_LOG_LEVEL, "propagate": False},
        "django": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}

# ---- Accounts and web safety: API tokens, throttles, Secure cookies unless DEBUG, log masking, INFERA_* switches ----
from console.accounts.security_settings import accounts_settings  # noqa: E402

globals().update(accounts_settings(debug=DEBUG, rest_framework=REST_FRAMEWORK, logging_config=LOGGING))
