"""The audit trail as people read it: GET /api/audit/ (JSON pages, or every matching event as CSV with
?format=csv), over the same filters and sort as the /audit/ page (console/registry/forms.py AuditFilterForm).

The CSV is streamed, oldest rows never held in memory; a cell that a spreadsheet would run as a formula (=, +, -, @
first) is prefixed with a quote.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from console.accounts.permissions import CanViewModels
from console.audit.models import AuditEvent
from console.listing import SortOrder
from console.registry.api import RegistryAPIView
from console.registry.forms import AUDIT_COLUMNS, AUDIT_ORDER, AuditFilterForm
from console.registry.serializers import AuditEventSerializer

CSV_HEADER = ("time_utc", "actor", "action", "object", "detail")
DEFAULT_SORT = "-time"


def audit_events(params: Any) -> tuple[AuditFilterForm, SortOrder, QuerySet[AuditEvent]]:
    """The filter form, the sort and the events that `params` (a query string) ask for."""
    form = AuditFilterForm(params)
    order = SortOrder(params, AUDIT_COLUMNS, DEFAULT_SORT)
    events = form.apply(AuditEvent.objects.all()).order_by(*order.order_by(AUDIT_ORDER))
    return form, order, events


def csv_lines(events: QuerySet[AuditEvent]) -> Iterator[str]:
    """The header, then one CSV line per event."""
    buffer = _Line()
    writer = csv.writer(buffer)
    yield writer.writerow(CSV_HEADER)
    for event in events.iterator(chunk_size=500):
        time = event.created_at.strftime("%Y-%m-%d %H:%M:%S")
        cells = (time, event.actor_name or "system", event.action, event.object, event.detail_text)
        yield writer.writerow([_inert(cell) for cell in cells])


def csv_response(events: QuerySet[AuditEvent]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(csv_lines(events), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="infera-audit.csv"'
    return response


class _Line:
    """A file for csv.writer whose write returns the line (so each row can be yielded as it is written)."""

    def write(self, line: str) -> str:
        return line


def _inert(cell: str) -> str:
    return f"'{cell}" if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


class CSVRenderer(BaseRenderer):
    """Makes ?format=csv (and Accept: text/csv) a format of the audit list; the view streams the body itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        # only errors (400, 403) come through here: the events themselves are streamed by the view
        return json.dumps(data).encode() if data is not None else b""


class AuditPagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000


@extend_schema(
    tags=["audit"],
    parameters=[
        OpenApiParameter("model", OpenApiTypes.STR, description="events on this model and its versions"),
        OpenApiParameter("action", OpenApiTypes.STR, description="e.g. version.activate"),
        OpenApiParameter("actor", OpenApiTypes.STR, description="user name ('system': changes nobody made by hand)"),
        OpenApiParameter("since", OpenApiTypes.DATE, description="from this day (UTC), YYYY-MM-DD"),
        OpenApiParameter("until", OpenApiTypes.DATE, description="up to and including this day (UTC), YYYY-MM-DD"),
        OpenApiParameter(
            "sort", OpenApiTypes.STR, description="time, actor, action or object; '-' first for descending (-time)"
        ),
        OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"], description="csv: every match, no pages"),
    ],
)
class AuditListView(generics.ListAPIView):
    """The audit trail, newest first unless sorted otherwise; as CSV, every event that matches."""

    authentication_classes = RegistryAPIView.authentication_classes
    permission_classes = [CanViewModels]
    serializer_class = AuditEventSerializer
    pagination_class = AuditPagination
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer, CSVRenderer]

    def get_queryset(self) -> QuerySet[AuditEvent]:
        form, _, events = audit_events(self.request.query_params)
        if not form.is_valid():
            raise ValidationError(form.errors.get_json_data())
        return events

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response | StreamingHttpResponse:
        if getattr(request.accepted_renderer, "format", None) == CSVRenderer.format:
            return csv_response(self.get_queryset())
        return super().list(request, *args, **kwargs)
