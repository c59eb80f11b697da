"""Repositories, in one home (docs/semantics.md §13): a session filled from a git clone or an upload
(``fill``), the clone's prepare job and where it runs (``jobs``, ``tasks``), the checks of a
request (``checks``), the owner's stored credentials (``credentials``) and a push of the
session's files back (``push``). The session's busy lock is taken and released through
``sessions_app/services/lock.py`` only."""
