"""Django settings for Infera, derived from the one InferaSettings object (console/config.py).

Every value a person sets lives in an `INFERA_*` variable (or DATABASE_URL / REDIS_URL); a wrong one stops
start-up with a message naming the variable. Unset, everything points under var/ for the embedded demo.
"""

from __future__ import annotations

from console.accounts.security_settings import (
    AUTHENTICATION_BACKENDS,
    SESSION_COOKIE_AGE,
    logging_settings,
    rest_framework_settings,
)
from console.config import BASE_DIR, read_settings
from console.env import secret_from_file
from console.settings_parts import channel_layer_settings, database_settings
from console.shared_cache import cache_settings

# ---- Infera's own settings: one frozen object, read once (console/config.py); use sites read settings.INFERA ----
INFERA = read_settings()

DEBUG = INFERA.debug
SECRET_KEY = INFERA.secret_key or secret_from_file(INFERA.var_dir / "secret_key")
# /v2 and /metrics never reach Django, so this list guards the console, the API and WebSockets
ALLOWED_HOSTS = list(INFERA.allowed_hosts)
CSRF_TRUSTED_ORIGINS = list(INFERA.csrf_trusted_origins)

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
    "console.audit",
    "console.registry",
    "console.analyzer",
    "console.registry.cluster",
    "drf_spectacular_sidecar",  # Swagger UI assets for /api/docs/, served locally
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "console.accounts.middleware.SecurityHeadersMiddleware",
    "console.failure_pages.FailurePagesMiddleware",
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

# ---- Data: DATABASE_URL (SQLite under var/ by default, PostgreSQL for replicas), REDIS_URL (channels, cache) ----
DATABASES = {"default": database_settings(INFERA.database_url, default_sqlite=INFERA.var_dir / "infera.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
CHANNEL_LAYERS = channel_layer_settings(INFERA.redis_url, peers_directory=INFERA.var_dir / "peers")
# the sign-in lockout and the API rate count here: on Redis, shared by every replica (console/shared_cache.py)
CACHES = cache_settings(INFERA.redis_url, workers=INFERA.workers, var_dir=INFERA.var_dir)

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

# ---- Web safety that holds on plain http too; cookies Secure unless debugging (or INFERA_SECURE_COOKIES=false) ----
SESSION_COOKIE_SECURE = INFERA.cookies_secure
CSRF_COOKIE_SECURE = INFERA.cookies_secure
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = SESSION_COOKIE_AGE
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
AUTHENTICATION_BACKENDS = AUTHENTICATION_BACKENDS

# ---- API ----
# API tokens next to sessions, and the per-token throttle on every view
REST_FRAMEWORK = rest_framework_settings(
    {
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
        "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
        "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
        # JSON nested at most engine.config.text_format.MAX_JSON_DEPTH levels (Python's parser recursed into a 500)
        "DEFAULT_PARSER_CLASSES": [
            "console.parsers.JSONParser",
            "rest_framework.parsers.FormParser",
            "rest_framework.parsers.MultiPartParser",
        ],
        # an address is the peer's (a trusted proxy's forwarding is applied before Django, console/forwarded.py);
        # DRF's default would believe any client's X-Forwarded-For
        "NUM_PROXIES": 0,
    }
)
SPECTACULAR_SETTINGS = {
    "TITLE": "Infera management API",
    "DESCRIPTION": "Models, versions, users and tokens of an Infera server. Inference itself is Triton's /v2.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # no deep links: Swagger UI puts each one inside its operation's toggle button (a link nested in a button)
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    "ENUM_NAME_OVERRIDES": {
        "VersionStateEnum": "console.registry.models.VersionState",
        "AnalysisStateEnum": "console.analyzer.models.AnalysisState",
    },
}

# ---- Static files: served by the ASGI process itself (console/static_serving.py), no collectstatic needed ----
STATIC_URL = "/static/"
STATIC_ROOT = INFERA.var_dir / "static"
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

# ---- Logging: secrets are masked on every handler ----
LOGGING = logging_settings(
    {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
        "loggers": {
            "engine": {"handlers": ["console"], "level": INFERA.log_level, "propagate": False},
            "console": {"handlers": ["console"], "level": INFERA.log_level, "propagate": False},
            "django": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        },
    }
)
