"""The ASGI entry point: `console.asgi:application` for uvicorn and daphne (see console/composition.py)."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

# Django sets up its apps here, before anything below imports models
django_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from console.accounts.inference_auth import v2_authenticator_from_settings  # noqa: E402
from console.composition import InferaApplication, build_engine  # noqa: E402
from console.monitoring.live import metrics_app  # noqa: E402
from console.registry.v2_hooks import RegistryRepositoryControl  # noqa: E402
from console.routing import websocket_urlpatterns  # noqa: E402

server, engine_application = build_engine(
    settings.INFERA_MODEL_STORE,
    authenticate=v2_authenticator_from_settings(),  # health endpoints stay open
    repository_control=RegistryRepositoryControl(),  # v2 load/unload change the registry's desired state
)
# /metrics is answered here, every other engine path by the v2 front end
engine_application = metrics_app(server, fallback=engine_application)

application = InferaApplication(
    django_app=django_application,
    websocket_app=AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    engine_app=engine_application,
    server=server,
)
