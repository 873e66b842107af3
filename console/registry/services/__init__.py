"""Domain actions on the registry: each changes the desired state, writes an audit event and tells the reconciler.

Views, the v2 repository control, the importer and management commands call these and nothing else; they alone
write audit events and change notices. Each is one transaction, and the "registry.changed" message goes out only
after it commits, so a reconciler never reads half a change. Whether a version may enter at all (who asks, whether
it runs code, a trial load) is the engine's decision, made at the serving process's server (`admitting`), the one
door of every entry, checked once per version; `actor` is a user, a Principal or a name.
"""
