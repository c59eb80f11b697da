"""``workspace.unpack``: hostile archives and folders, built here in memory. Each refusal
test would fail on a plain ``tarfile``/``zipfile`` ``extractall``: it expects a refusal and
nothing left behind (nor written outside)."""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from workspace import unpack_checks, unpack_tree, unpack_zip
from workspace.unpack import unpack_archive, unpack_files
from workspace.unpack_checks import ArchiveRefused
from workspace.unpack_tree import Unpacked

MiB = 1024 * 1024


# -- building archives ---------------------------------------------------------------------------
def t_file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def t_entry(name: str, kind: bytes, linkname: str = "", mode: int = 0o755):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, mode
    return info, None


def t_dir(name: str, mode: int = 0o755):
    return t_entry(name, tarfile.DIRTYPE, mode=mode)


def t_sym(name: str, target: str):
    return t_entry(name, tarfile.SYMTYPE, target)


def t_hard(name: str, target: str):
    return t_entry(name, tarfile.LNKTYPE, target)


def make_tar(entries, *, gz: bool = False, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return gzip.compress(buf.getvalue()) if gz else buf.getvalue()


def z_entry(name: str, data: bytes = b"x", mode: int | None = 0o644, deflate: bool = True):
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    if mode is not None:
        kind = stat.S_IFMT(mode) or (stat.S_IFDIR if name.endswith("/") else stat.S_IFREG)
        info.external_attr = (kind | stat.S_IMODE(mode)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    return info, data


def z_sym(name: str, target: str):
    return z_entry(name, target.encode(), stat.S_IFLNK | 0o777)


def make_zip(entries) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for info, data in entries:
            archive.writestr(info, data)
    return buf.getvalue()


def build(fmt: str, entries: list[tuple]) -> tuple[bytes, str]:
    """``entries``: ("file", name, data, mode) / ("dir", name) / ("sym", name, target), as a
    tar, tar.gz or zip, and a file name for it."""
    if fmt == "zip":
        made = []
        for kind, name, *rest in entries:
            if kind == "file":
                made.append(z_entry(name, rest[0], rest[1] if len(rest) > 1 else 0o644))
            elif kind == "dir":
                made.append(z_entry(name.rstrip("/") + "/", b"", 0o755))
            else:
                made.append(z_sym(name, rest[0]))
        return make_zip(made), "up.zip"
    made = []
    for kind, name, *rest in entries:
        if kind == "file":
            made.append(t_file(name, rest[0], rest[1] if len(rest) > 1 else 0o644))
        elif kind == "dir":
            made.append(t_dir(name))
        else:
            made.append(t_sym(name, rest[0]))
    gz = fmt == "tar.gz"
    return make_tar(made, gz=gz), "up.tar.gz" if gz else "up.tar"


# -- running it ----------------------------------------------------------------------------------
@pytest.fixture
def dest(tmp_path: Path) -> Path:
    return tmp_path / "staging" / "tree"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the tree that nothing may reach."""
    path = tmp_path / "outside"
    path.mkdir()
    return path


def limits(**overrides) -> dict:
    deadline = time.monotonic() + 60
    return {"max_bytes": 100 * MiB, "max_files": 1000, "deadline": deadline} | overrides


def run(data: bytes, dest: Path, name: str = "up.tar", **overrides) -> Unpacked:
    return unpack_archive(io.BytesIO(data), dest, name=name, **limits(**overrides))


def refused(data: bytes, dest: Path, name: str = "up.tar", **overrides) -> str:
    """The refusal's sentence; nothing is left of ``dest``."""
    with pytest.raises(ArchiveRefused) as caught:
        run(data, dest, name, **overrides)
    assert not dest.exists()
    return sentence(caught.value)


def sentence(exc: ArchiveRefused) -> str:
    text = str(exc)
    assert text.endswith(".") and "\n" not in text and text[0].isupper(), text
    return text


def tree_of(root: Path) -> dict[str, str]:
    """Each path under ``root``: "dir", "link:<target>" or its text."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[rel] = f"link:{os.readlink(path)}"
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = path.read_bytes().decode()
    return found


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- what is kept --------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["tar", "tar.gz", "zip"])
def test_unpacks_files_dirs_links_and_top_level_git(fmt, dest):
    data, name = build(
        fmt,
        [
            ("file", "README.md", b"hello", 0o644),
            ("dir", "src", 0o700),
            ("file", "src/run.sh", b"#!/bin/sh", 0o4755),  # setuid: dropped, exec kept
            ("file", "src/lib.py", b"pass", 0o6664),  # setgid, setuid: dropped
            ("file", "src/deep/er/mod.py", b"deep"),  # directories made on the way
            ("sym", "src/readme", "../README.md"),
            ("file", ".git/HEAD", b"ref: refs/heads/main"),  # the user's repository
            ("file", "a/.GIT/config", b"[core]"),  # a name git refuses: kept
        ],
    )
    done = run(data, dest, name)
    assert done == Unpacked(files=7, bytes=5 + 9 + 4 + 4 + 20 + 6)
    assert tree_of(dest) == {
        ".git": "dir",
        ".git/HEAD": "ref: refs/heads/main",
        "README.md": "hello",
        "a": "dir",
        "a/.GIT": "dir",
        "a/.GIT/config": "[core]",
        "src": "dir",
        "src/deep": "dir",
        "src/deep/er": "dir",
        "src/deep/er/mod.py": "deep",
        "src/lib.py": "pass",
        "src/readme": "link:../README.md",
        "src/run.sh": "#!/bin/sh",
    }
    assert mode_of(dest / "src/run.sh") == 0o755
    assert mode_of(dest / "src/lib.py") == 0o644
    assert mode_of(dest / "README.md") == 0o644
    for directory in ("src", "src/deep", "src/deep/er", ".git"):
        assert mode_of(dest / directory) == 0o755


def test_modes_never_setuid_setgid_sticky(dest):
    data = make_tar(
        [
            t_dir("sticky", 0o1777),
            t_dir("private", 0o700),
            t_dir("setgid", 0o2775),
            t_file("sticky/all", b"1", 0o7777),
            t_file("private/secret", b"2", 0o600),
            t_file("setgid/tool", b"3", 0o2711),
            t_file("group-exec", b"4", 0o610),
        ]
    )
    run(data, dest)
    assert mode_of(dest / "sticky") == mode_of(dest / "private") == mode_of(dest / "setgid")
    assert mode_of(dest / "sticky") == 0o755
    assert mode_of(dest / "sticky/all") == 0o755
    assert mode_of(dest / "private/secret") == 0o644
    assert mode_of(dest / "setgid/tool") == 0o755
    assert mode_of(dest / "group-exec") == 0o755


def test_dot_components_and_repeated_directories(dest):
    data = make_tar(
        [
            t_dir("."),
            t_file("./a/b.txt", b"b"),
            t_dir("./a"),  # after its file: already made
            t_dir("a/"),
            t_file("a//c.txt", b"c"),
        ]
    )
    assert run(data, dest) == Unpacked(files=2, bytes=2)
    assert tree_of(dest) == {"a": "dir", "a/b.txt": "b", "a/c.txt": "c"}


def test_empty_archive_gives_an_empty_tree(dest):
    assert run(make_tar([]), dest) == Unpacked(files=0, bytes=0)
    assert dest.is_dir() and not any(dest.iterdir())


# -- names -----------------------------------------------------------------------------------
BAD_NAMES = [
    "../evil.txt",
    "ok/../../evil.txt",
    "a/../b.txt",  # '..' even when it stays inside
    "/tmp/evil-absolute.txt",
    "C:\\Windows\\evil.txt",
    "..\\..\\evil.txt",
    "ok\\..\\..\\evil.txt",
    "C:/evil.txt",
    "C:evil.txt",
]


@pytest.mark.parametrize("fmt", ["tar", "zip"])
@pytest.mark.parametrize("bad", BAD_NAMES)
def test_refuses_names_leading_out(fmt, bad, dest, outside):
    data, name = build(fmt, [("file", "first.txt", b"kept?"), ("file", bad, b"evil")])
    text = refused(data, dest, name)
    assert repr(bad) in text
    assert not any(outside.iterdir())
    assert not (dest.parent / "evil.txt").exists()


def test_refuses_nul_and_empty_names_in_tar(dest):
    # A pax path may hold a NUL (the ustar field would be cut at it).
    nul = t_file("placeholder", b"x")
    nul[0].pax_headers = {"path": "safe.txt\x00../../evil"}
    assert "NUL" in refused(make_tar([t_file("first.txt"), nul]), dest)
    assert "empty name" in refused(make_tar([t_file("first.txt"), t_file("")]), dest)
    assert "names the folder itself" in refused(make_tar([t_file("./")]), dest)


def test_refuses_nul_and_empty_names_in_zip(dest):
    # zipfile cuts a name at a NUL when it reads it: the member would be unpacked as "nul".
    data = make_zip([z_entry("first.txt"), z_entry("nul_../../evil")])
    data = data.replace(b"nul_../../evil", b"nul\x00../../evil")
    assert "NUL" in refused(data, dest, "up.zip")
    assert "empty name" in refused(make_zip([z_entry("")]), dest, "up.zip")


def test_refuses_names_longer_than_the_kernel_takes(dest):
    assert "longer than 255" in refused(make_tar([t_file("a" * 256)]), dest)
    deep = "/".join(["d" * 200] * 21)  # over PATH_MAX with the tree's own path
    assert "too long" in refused(make_tar([t_file(deep)]), dest)


@pytest.mark.parametrize(
    "entries",
    [
        [t_file("a.txt"), t_file("a.txt")],
        [t_file("a"), t_dir("a")],
        [t_dir("a"), t_file("a")],
        [t_file("a"), t_sym("a", "b")],
        [t_dir("sub"), t_sym("sub", ".")],
    ],
    ids=["file-twice", "file-then-dir", "dir-then-file", "file-then-link", "dir-then-link"],
)
def test_refuses_the_same_path_twice(entries, dest):
    assert "twice" in refused(make_tar(entries), dest)


def test_refuses_a_member_inside_a_file(dest):
    assert "inside the file 'a'" in refused(make_tar([t_file("a"), t_file("a/b")]), dest)


# -- symbolic links ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["tar", "zip"])
@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("abs", "/etc/passwd"),
        ("up", ".."),
        ("up2", "../outside"),
        ("sub/up", "../../outside/x"),
        ("sub/round", "../sub/../../x"),
        ("win", "C:\\Windows"),
        ("back", "..\\outside"),
        ("empty", ""),
    ],
)
def test_refuses_links_leaving_the_tree(fmt, link, target, dest, outside):
    data, name = build(fmt, [("dir", "sub"), ("file", "first.txt", b"x"), ("sym", link, target)])
    assert "symbolic link" in refused(data, dest, name)
    assert not any(outside.iterdir())


@pytest.mark.parametrize("fmt", ["tar", "zip"])
def test_keeps_links_inside_the_tree(fmt, dest):
    data, name = build(
        fmt,
        [
            ("file", "top.txt", b"top"),
            ("sym", "sub/to-top", "../top.txt"),
            ("sym", "sub/self", "."),
            ("sym", "sub/root", ".."),  # the tree itself
            ("sym", "dangling", "missing/file"),
            ("sym", "via-dots", "sub/./../top.txt"),
        ],
    )
    assert run(data, dest, name).files == 6
    assert os.readlink(dest / "sub/to-top") == "../top.txt"
    assert (dest / "sub/to-top").read_text() == "top"
    assert os.readlink(dest / "sub/root") == ".."


def test_refuses_a_link_that_leaves_through_another_link(dest):
    # Each looks inside on its own: d/up is the tree, and d/up/.. lexically is d. But the kernel
    # follows d/up first, and ".." of the tree is its parent.
    data = make_tar([t_dir("d"), t_sym("d/up", ".."), t_sym("escape", "d/up/..")])
    assert "through another link" in refused(data, dest)
    # The other order too: the chain is only checked once every link is there.
    data = make_tar([t_dir("d"), t_sym("escape", "d/up/.."), t_sym("d/up", "..")])
    assert "through another link" in refused(data, dest)


def test_a_loop_of_links_leads_nowhere_and_is_kept(dest):
    run(make_tar([t_sym("a", "b"), t_sym("b", "a")]), dest)
    assert os.readlink(dest / "a") == "b"


# -- writes through links ----------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["tar", "zip"])
def test_never_writes_through_an_in_tree_link(fmt, dest):
    data, name = build(
        fmt,
        [("dir", "sub"), ("sym", "d", "sub"), ("file", "d/evil", b"through the link")],
    )
    assert "inside the symbolic link 'd'" in refused(data, dest, name)


def test_never_writes_through_a_link_to_a_directory_member(dest):
    data = make_tar([t_dir("sub"), t_sym("d", "sub"), t_dir("d/inner")])
    assert "inside the symbolic link 'd'" in refused(data, dest)


@pytest.mark.parametrize("target", ["../../outside", "/TARGET"])
def test_never_writes_through_a_link_leading_out(target, dest, outside):
    target = target.replace("/TARGET", str(outside))
    data = make_tar([t_sym("a", target), t_file("a/evil", b"evil")])
    assert "symbolic link" in refused(data, dest)
    assert not any(outside.iterdir())


def test_writes_use_no_follow_even_if_the_bookkeeping_missed_a_link(dest, outside, monkeypatch):
    # Belt and braces: were a link not recorded, opening through it still fails (O_NOFOLLOW).
    monkeypatch.setattr(unpack_tree.Tree, "_new", lambda self, parts, name, kind: True)
    real = unpack_tree.Tree.add_symlink

    def unrecorded(self, name, target):
        real(self, name, target)
        del self.kinds[self.parts(name)]

    monkeypatch.setattr(unpack_tree.Tree, "add_symlink", unrecorded)
    data = make_tar([t_dir("sub"), t_sym("d", "sub"), t_file("d/evil", b"evil")])
    with pytest.raises(OSError):
        run(data, dest)
    assert not dest.exists()


# -- hard links ----------------------------------------------------------------------------------
def test_hard_link_to_an_earlier_file(dest):
    data = make_tar([t_file("./a.txt", b"data"), t_hard("sub/b.txt", "a.txt")])
    assert run(data, dest) == Unpacked(files=2, bytes=8)  # each name a file of 4 bytes
    assert os.stat(dest / "a.txt").st_ino == os.stat(dest / "sub/b.txt").st_ino
    assert (dest / "sub/b.txt").read_text() == "data"


def test_hard_links_count_their_files_bytes_before_they_are_made(dest):
    """Issue 42, finding 2: one 9 KiB file and 300 hard links to it were 9 KiB to the limit
    and 2.7 MiB to every later reader of the worktree (its size limit, each snapshot)."""
    links = [t_hard(f"copy-{i}.bin", "big.bin") for i in range(300)]
    data = make_tar([t_file("big.bin", b"z" * 9 * 1024), *links])
    assert "more than 102,400 bytes" in refused(data, dest, max_bytes=100 * 1024)
    assert run(data, dest, max_bytes=301 * 9 * 1024).bytes == 301 * 9 * 1024


@pytest.mark.parametrize(
    "entries",
    [
        [t_hard("passwd", "/etc/passwd")],
        [t_hard("out", "../outside/secret")],
        [t_hard("missing", "nowhere.txt")],
        [t_hard("early", "later.txt"), t_file("later.txt")],
        [t_sym("link", "a.txt"), t_file("a.txt"), t_hard("to-link", "link")],
        [t_dir("d"), t_hard("to-dir", "d")],
        [t_file("a.txt"), t_hard("a.txt", "a.txt")],
    ],
    ids=["absolute", "dotdot", "missing", "later", "to-symlink", "to-dir", "onto-itself"],
)
def test_refuses_other_hard_links(entries, dest, outside):
    (outside / "secret").write_text("secret")
    refused(make_tar([t_file("first.txt"), *entries]), dest)
    assert (outside / "secret").stat().st_nlink == 1


# -- special members -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind",
    [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE, b"Z"],
    ids=["chr", "blk", "fifo", "unknown"],
)
def test_refuses_tar_special_members(kind, dest):
    device = tarfile.TarInfo("dev")
    device.type, device.devmajor, device.devminor = kind, 1, 3  # /dev/null's numbers
    text = refused(make_tar([t_file("first.txt"), (device, None)]), dest)
    assert "only files, folders and links" in text


@pytest.mark.parametrize("kind", [stat.S_IFCHR, stat.S_IFBLK, stat.S_IFIFO, stat.S_IFSOCK])
def test_refuses_zip_special_members(kind, dest):
    data = make_zip([z_entry("first.txt"), z_entry("special", b"", kind | 0o644)])
    assert "only files, folders and links" in refused(data, dest, "up.zip")


def test_refuses_encrypted_zip_members(dest):
    # zipfile does not write encrypted members: the flag is set in both headers by hand.
    data = bytearray(make_zip([z_entry("secret.txt", b"x", deflate=False)]))
    central = data.index(b"PK\x01\x02")
    data[6] |= 0x1
    data[central + 8] |= 0x1
    assert "encrypted" in refused(bytes(data), dest, "up.zip")


# -- limits --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["tar", "tar.gz", "zip"])
def test_file_count_limit(fmt, dest):
    entries = [("file", f"f{i}.txt", b"x") for i in range(6)]
    data, name = build(fmt, entries)
    assert "more than 5 files" in refused(data, dest, name, max_files=5)
    assert run(data, dest, name, max_files=6).files == 6


def test_folder_count_limit(dest):
    data = make_tar([t_file("a/b/c/d/f.txt")])
    assert "more than 3 folders" in refused(data, dest, max_files=3)


def test_zip_entries_are_counted_before_zipfile_loads_them(dest, monkeypatch):
    data = make_zip([z_entry(f"f{i}", b"") for i in range(50)])
    monkeypatch.setattr(unpack_zip.zipfile, "ZipFile", lambda *a, **k: pytest.fail("loaded"))
    assert "more than 10 files" in refused(data, dest, "up.zip", max_files=10)


def test_tar_member_count_counts_repeated_directories(dest):
    data = make_tar([t_dir("./") for _ in range(30)])
    assert "more than 10 files" in refused(data, dest, max_files=10)


@pytest.mark.parametrize("fmt", ["tar", "tar.gz", "zip"])
def test_byte_limit(fmt, dest):
    data, name = build(fmt, [("file", "a", b"a" * 600), ("file", "b", b"b" * 500)])
    assert "more than 1,000 bytes" in refused(data, dest, name, max_bytes=1000)
    assert run(data, dest, name, max_bytes=1100).bytes == 1100


def test_byte_limit_counts_what_is_written_not_what_is_claimed(dest):
    class Claims(io.BytesIO):
        size = 10  # a header's (or an upload's) size, smaller than the content

    content = Claims(b"z" * (3 * MiB))
    with pytest.raises(ArchiveRefused, match="more than 2,097,152 bytes"):
        unpack_files([("big.bin", content)], dest, **limits(max_bytes=2 * MiB))
    assert content.tell() <= 2 * MiB + 1  # never read, let alone written, past the limit
    assert not dest.exists()


def test_byte_limit_refuses_early_on_the_header(dest):
    class Watched(io.BytesIO):
        reads = 0

        def read(self, size=-1):
            self.reads += 1
            return super().read(size)

    # 64 MiB of zeros behind a header that says so: refused before its data is read.
    big = io.BytesIO()
    with tarfile.open(fileobj=big, mode="w") as tar:
        info = tarfile.TarInfo("zeros")
        info.size = 64 * MiB
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    source = Watched(big.getvalue())
    started = time.monotonic()
    with pytest.raises(ArchiveRefused, match="bytes"):
        unpack_archive(source, dest, name="up.tar", **limits(max_bytes=MiB))
    assert source.tell() < MiB and time.monotonic() - started < 5


@pytest.fixture(scope="module")
def zip_bomb() -> bytes:
    """200 MiB of zeros in about 200 KiB."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("small.txt", b"fine")
        with archive.open("zeros.bin", "w") as member:
            for _ in range(200):
                member.write(bytes(MiB))
    assert len(buf.getvalue()) < 400 * 1024
    return buf.getvalue()


@pytest.mark.parametrize("max_bytes", [10 * MiB, 1024 * MiB, 0], ids=["limit", "high", "none"])
def test_zip_bomb_is_refused_quickly(zip_bomb, max_bytes, dest):
    started = time.monotonic()
    text = refused(zip_bomb, dest, "bomb.zip", max_bytes=max_bytes)
    assert time.monotonic() - started < 5
    assert "zip bomb" in text or "bytes" in text


def test_zip_ratio_applies_past_one_mib(dest):
    small = z_entry("small-zeros", bytes(900 * 1024))  # far over 200:1, but under 1 MiB
    text = os.urandom(2 * MiB)  # 2 MiB that do not compress
    data = make_zip([small, z_entry("text", text)])
    assert run(data, dest, "up.zip").bytes == 900 * 1024 + len(text)
    data = make_zip([z_entry("zeros", bytes(2 * MiB))])
    assert "expands more than 200 times" in refused(data, dest / "again", "up.zip")


def test_zip_ratio_is_checked_while_streaming_too(dest):
    # zipfile stops a member at the size its header gives, which the header check compares:
    # the count of what is written is checked as well, directly here.
    with pytest.raises(ArchiveRefused, match="expands more than 200 times"):
        deadline = time.monotonic() + 60
        with unpack_tree.unpacking(dest, "archive", "archive entry", 0, 0, deadline) as tree:
            tree.add_file("zeros", io.BytesIO(bytes(3 * MiB)), executable=False, ratio_base=10_000)
    assert not dest.exists()


def test_tar_gz_header_bomb_is_refused_quickly(dest):
    # A GNU long name of 8 MiB: tarfile would read it whole into memory.
    long = t_file("x" * (8 * MiB), b"")
    data = make_tar([long], gz=True, fmt=tarfile.GNU_FORMAT)
    started = time.monotonic()
    assert "header over 1,024 KiB" in refused(data, dest, "up.tgz")
    assert time.monotonic() - started < 5


def test_tar_gz_data_bomb_is_refused_without_writing(dest):
    zeros = io.BytesIO()
    with tarfile.open(fileobj=zeros, mode="w:gz") as tar:
        info = tarfile.TarInfo("zeros")
        info.size = 200 * MiB
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    started = time.monotonic()
    refused(zeros.getvalue(), dest, "up.tar.gz", max_bytes=10 * MiB)
    assert time.monotonic() - started < 5


# -- deadline ------------------------------------------------------------------------------------
def test_deadline_already_past(dest):
    text = refused(make_tar([t_file("a")]), dest, deadline=time.monotonic() - 1)
    assert "took longer than 0 s" in text


def test_deadline_within_a_large_member(dest, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(unpack_checks, "_now", lambda: clock[0])

    class Slow(io.BytesIO):
        def read(self, size=-1):
            clock[0] += 1.0  # each MiB takes a second
            return super().read(size)

    content = Slow(bytes(10 * MiB))
    with pytest.raises(ArchiveRefused) as caught:
        unpack_files([("slow.bin", content)], dest, **limits(deadline=102.5))
    assert "took longer than 2.5 s" in sentence(caught.value)
    assert content.tell() <= 4 * MiB
    assert not dest.exists()


def test_deadline_between_members(dest, monkeypatch):
    clock = [0.0]

    def tick():
        clock[0] += 0.5
        return clock[0]

    monkeypatch.setattr(unpack_checks, "_now", tick)
    data = make_tar([t_file(f"f{i}") for i in range(100)])
    refused(data, dest, deadline=20.0)


# -- what is left behind -----------------------------------------------------------------------
def test_an_existing_empty_dest_is_left_empty(dest):
    dest.mkdir(parents=True)
    data = make_tar([t_file("a/b/c.txt"), t_sym("a/l", "b"), t_file("../evil")])
    with pytest.raises(ArchiveRefused):
        run(data, dest)
    assert dest.is_dir() and not any(dest.iterdir())


def test_dest_must_be_absent_or_empty(dest):
    dest.mkdir(parents=True)
    (dest / "keep").write_text("mine")
    with pytest.raises(ValueError):
        run(make_tar([t_file("a")]), dest)
    assert (dest / "keep").read_text() == "mine"


def test_a_write_error_also_leaves_nothing(dest, monkeypatch):
    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(unpack_tree.os, "write", full)
    with pytest.raises(OSError):
        run(make_tar([t_file("a/b.txt", b"data")]), dest)
    assert not dest.exists()


# -- formats -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "name", "says"),
    [
        (b"", "empty.zip", "is empty"),
        (b"Rar!\x1a\x07\x00" + bytes(100), "x.rar", "not a .zip, .tar or .tar.gz"),
        (b"plain text, not an archive", "notes.txt", "not a .zip, .tar or .tar.gz"),
        (b"BZh91AY&SY" + bytes(100), "x.tar.bz2", "not a .zip, .tar or .tar.gz"),
        (b"PK\x03\x04" + bytes(100), "broken.zip", "could not be read"),
        (gzip.compress(b"not a tar at all" * 100), "x.tgz", "could not be read"),
        (b"garbage" * 100, "x.tar", "could not be read"),
    ],
    ids=["empty", "rar", "text", "bz2", "bad-zip", "gz-not-tar", "bad-tar"],
)
def test_refuses_other_and_damaged_files(data, name, says, dest):
    assert says in refused(data, dest, name)


def test_refuses_a_truncated_tar_gz(dest):
    data = make_tar([t_file("a", bytes(range(256)) * 400)], gz=True)
    assert "could not be read" in refused(data[: len(data) // 2], dest, "up.tar.gz")


def test_refuses_a_zip_with_a_bad_checksum(dest):
    data = make_zip([z_entry("a.txt", b"the original text", deflate=False)])
    data = data.replace(b"the original text", b"the altered! text")
    assert "could not be read" in refused(data, dest, "up.zip")


def test_kind_comes_from_the_content_not_the_name(dest):
    data, _ = build("zip", [("file", "a.txt", b"zip")])
    assert run(data, dest, "misnamed.tar.gz").files == 1


class OneWay(io.RawIOBase):
    """A non-seekable stream that records the size of each read."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)
        self.sizes: list[int] = []

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.sizes.append(size)
        return self.data.read(size)


@pytest.mark.parametrize("gz", [False, True])
def test_tar_is_streamed_front_to_back_in_bounded_reads(gz, dest):
    data = make_tar([t_file(f"f{i}.bin", os.urandom(MiB)) for i in range(5)], gz=gz)
    source = OneWay(data)
    done = unpack_archive(source, dest, name="up.tgz" if gz else "up.tar", **limits())
    assert done == Unpacked(files=5, bytes=5 * MiB)
    assert all(0 < size <= 2 * MiB for size in source.sizes), max(source.sizes)


def test_non_seekable_zip_is_spooled(dest):
    data, _ = build("zip", [("file", "a.txt", b"spooled")])
    unpack_archive(OneWay(data), dest, name="up.zip", **limits())
    assert (dest / "a.txt").read_text() == "spooled"


# -- a dropped folder ----------------------------------------------------------------------------
def test_unpack_files_writes_the_folder(dest):
    files = [
        ("myproj/src/a.py", io.BytesIO(b"print(1)\n")),
        ("myproj/README", io.BytesIO(b"readme")),
        ("myproj/.git/HEAD", io.BytesIO(b"ref")),
    ]
    done = unpack_files(files, dest, **limits())
    assert done == Unpacked(files=3, bytes=9 + 6 + 3)
    assert tree_of(dest) == {
        "myproj": "dir",
        "myproj/.git": "dir",
        "myproj/.git/HEAD": "ref",
        "myproj/README": "readme",
        "myproj/src": "dir",
        "myproj/src/a.py": "print(1)\n",
    }
    assert mode_of(dest / "myproj/src/a.py") == 0o644


@pytest.mark.parametrize("bad", [*BAD_NAMES, "", "a\x00b", "/", "./", "a/../../b"])
def test_unpack_files_refuses_bad_paths(bad, dest, outside):
    files = [("myproj/ok.txt", io.BytesIO(b"ok")), (bad, io.BytesIO(b"evil"))]
    with pytest.raises(ArchiveRefused) as caught:
        unpack_files(files, dest, **limits())
    sentence(caught.value)
    assert not dest.exists() and not any(outside.iterdir())


def test_unpack_files_limits_and_duplicates(dest):
    many = [(f"p/f{i}", io.BytesIO(b"x")) for i in range(4)]
    with pytest.raises(ArchiveRefused, match="more than 3 files"):
        unpack_files(many, dest, **limits(max_files=3))
    twice = [("p/a", io.BytesIO(b"1")), ("p/a", io.BytesIO(b"2"))]
    with pytest.raises(ArchiveRefused, match="uploaded twice"):
        unpack_files(twice, dest, **limits())
    nested = [("p/a", io.BytesIO(b"1")), ("p/a/b", io.BytesIO(b"2"))]
    with pytest.raises(ArchiveRefused, match="inside the file"):
        unpack_files(nested, dest, **limits())
    assert not dest.exists()


def test_zero_limits_mean_none(dest):
    data = make_tar([t_file(f"f{i}", b"x" * 100) for i in range(20)])
    assert run(data, dest, max_bytes=0, max_files=0) == Unpacked(files=20, bytes=2000)
