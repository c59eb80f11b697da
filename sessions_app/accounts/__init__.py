"""People added without a shell (issue 46, point 15): self sign-up (``SIGNUP``: off, open or
approval, where a new account waits for an admin) and invitation links made in the admin.
A Django app of its own (label ``accounts``) inside ``sessions_app``, with its own
migrations; docs/accounts.md tells the operator's side."""
