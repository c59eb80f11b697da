"""A fetched commit's tree, measured before a file of it is written (issue 42, finding 1): a
clone is made with ``--no-checkout``, ``git ls-tree -r -t -l -z`` lists what the checkout
would write, and ``TreeCount`` adds it up as git prints it. Past a bound the listing is
stopped (the runner kills git) and nothing was written: a 430 KB pack naming one 300 MB blob
ten times is refused having cost 430 KB.

What is counted is what the checkout makes: each blob its bytes (a file's content, a link's
target), each blob, link, gitlink and tree an entry (an inode and a directory slot, as
``WORKTREE_MAX_ENTRIES`` counts them; a tree of millions of directories is refused like one
of millions of files). The checkout writes exactly these bytes: ``neutral_attributes``
switches off what a repository's ``.gitattributes`` could make larger on the way out (line
ending conversion, a working-tree encoding such as UTF-32, ``ident``, filters)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .repos import RepoLimitError

# $GIT_DIR/info/attributes wins over every .gitattributes of the tree.
NEUTRAL = "* -text -eol -working-tree-encoding -filter -ident\n"


class TreeTooLarge(RepoLimitError):
    """A bound passed: ``str(exc)`` is one sentence for the user."""


@dataclass
class TreeCount:
    """``ls-tree -r -t -l -z`` output, fed in chunks as it comes; ``TreeTooLarge`` from
    ``feed`` as soon as a bound (0: none) is passed."""

    max_bytes: int = 0
    max_files: int = 0
    max_entries: int = 0
    files: int = 0  # blobs: regular files and symbolic links
    entries: int = 0  # blobs, trees, gitlinks
    bytes: int = 0
    _pending: bytes = field(default=b"", repr=False)

    def feed(self, chunk: bytes) -> None:
        records = (self._pending + chunk).split(b"\0")
        self._pending = records.pop()
        for record in records:
            self._count(record)
        if len(self._pending) > 65536:  # no record of git's is this long: not ls-tree output
            raise TreeTooLarge("The repository's tree could not be read.")

    def _count(self, record: bytes) -> None:
        meta, _, _path = record.partition(b"\t")
        fields = meta.split()
        if len(fields) != 4:
            return
        kind, size = fields[1], fields[3]
        self.entries += 1
        if kind == b"blob":
            self.files += 1
            self.bytes += int(size) if size.isdigit() else 0
        self._check()

    def _check(self) -> None:
        if self.max_files and self.files > self.max_files:
            raise TreeTooLarge(
                f"The repository has more than {self.max_files:,} files (REPO_MAX_FILES)."
            )
        if self.max_entries and self.entries > self.max_entries:
            raise TreeTooLarge(
                f"The repository has more than {self.max_entries:,} files and folders "
                "(WORKTREE_MAX_ENTRIES)."
            )
        if self.max_bytes and self.bytes > self.max_bytes:
            raise TreeTooLarge(
                f"The repository's files are larger than {self.max_bytes:,} bytes "
                "(REPO_MAX_BYTES, or the owner's worktree quota)."
            )


def neutral_attributes(git_dir: Path) -> Path:
    """Write ``info/attributes`` so that the checkout writes each blob's bytes as they are;
    its path, for the caller to remove once the checkout is done."""
    info = git_dir / "info"
    info.mkdir(exist_ok=True)
    path = info / "attributes"
    path.write_text(NEUTRAL)
    return path
