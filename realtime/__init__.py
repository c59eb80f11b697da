"""How events reach browsers: published after commit and numbered (``events``), carried by
the pipelined Redis channel layer (``channel_layer``); the websocket origin check. The session
websocket itself (``sessions_app.consumers``) authorizes against the session row, so it lives
with the sessions."""
