"""versions.source_commit: which commit a result file names, on this machine and on the device
(a working tree newer than its copy of .git, with `.commit` written before the call)."""
import os
import subprocess

from cudal2.versions import source_commit

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t"}


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env=ENV).stdout.strip()


def test_commit_pinned_only_where_git_does_not_know_it(tmp_path):
    _git(tmp_path, "init", "-q")
    for i in (1, 2):
        (tmp_path / "f").write_text(str(i))
        _git(tmp_path, "add", "f")
        _git(tmp_path, "commit", "-qm", f"c{i}")
    head = _git(tmp_path, "rev-parse", "--short", "HEAD")
    older = _git(tmp_path, "rev-parse", "--short", "HEAD~1")
    assert source_commit(tmp_path) == head                      # no .commit
    (tmp_path / ".commit").write_text(older + "\n")             # a stale file from an earlier call
    assert source_commit(tmp_path) == head
    (tmp_path / ".commit").write_text("2729405\n")              # newer than this .git (the device)
    assert source_commit(tmp_path) == "2729405"


def test_commit_without_git(tmp_path):
    assert source_commit(tmp_path / "nowhere") == "unknown"
    (tmp_path / ".commit").write_text("abc1234\n")
    assert source_commit(tmp_path) == "abc1234"
