"""`{{ text|shown }}`: text as console users see it, without this server's paths (console/server_paths.py)."""

from __future__ import annotations

from django import template

from console.server_paths import shown as without_server_paths

register = template.Library()


@register.filter
def shown(text: object) -> str:
    return without_server_paths(str(text)) if text else ""


# what each audit action did, as a sentence's verb ("admin uploaded a version digits/3")
ACTION_VERBS = {
    "analysis.apply": "applied an analysis' recommendation to",
    "analysis.cancel": "cancelled an analysis of",
    "analysis.start": "started an analysis of",
    "config.edit": "edited the config of",
    "model.delete": "deleted the model",
    "model.register": "registered the model",
    "model.update": "changed the description of",
    "repository.import": "imported from the model store",
    "repository.poll": "picked up a change in the model store to",
    "token.budget": "set the budget of the token",
    "token.issue": "issued the token",
    "token.revoke": "revoked the token",
    "traffic.promote": "promoted the candidate of",
    "traffic.rollback": "rolled back the traffic of",
    "traffic.set": "changed the traffic of",
    "user.activate": "reactivated the user",
    "user.budget": "set the budget of the user",
    "user.create": "created the user",
    "user.deactivate": "deactivated the user",
    "user.delete": "deleted the user",
    "user.password_reset": "reset the password of",
    "user.role": "changed the role of",
    "version.activate": "activated the version",
    "version.config": "reloaded with a new config the version",
    "version.delete": "deleted the version",
    "version.load": "asked to load the version",
    "version.unload": "asked to unload the version",
    "version.upload": "uploaded the version",
}


@register.filter
def action_verb(action: str) -> str:
    """An audit action as words ("version.upload" → "uploaded the version"); an unknown one as it is."""
    return ACTION_VERBS.get(action, action)


@register.filter
def actor_shown(name: str) -> str:
    """Who acted, in words: the system for no one, and a command run on the server as such."""
    if not name:
        return "system"
    if name.startswith("manage.py"):
        return f"a command on the server ({name})"
    return name
