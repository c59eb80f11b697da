# The central snapshot store of a deployment of several worker hosts (docs/operations.md,
# "Several worker hosts"): one bare git repository behind sshd, for the account `git` whose
# only shell is git-shell. The workers' public key goes in authorized_keys (mounted read-only
# at /etc/agentplat/store_authorized_keys); the repository lives in the volume /srv/git.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends git openssh-server \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --shell /usr/bin/git-shell git \
 && mkdir -p /run/sshd /srv/git && chown git:git /srv/git \
 && printf 'PasswordAuthentication no\nPermitRootLogin no\nAllowUsers git\nAuthorizedKeysFile /etc/agentplat/store_authorized_keys\n' >> /etc/ssh/sshd_config
CMD ["sh", "-c", "ssh-keygen -A && (test -d /srv/git/snapshots.git || su git -s /bin/sh -c 'git init -q --bare /srv/git/snapshots.git') && exec /usr/sbin/sshd -D -e"]
