
import pytest
import torch

from gem_core.runtime import store
from gem_core.runtime.store import ArtifactError, atomic_path, load_torch, save_json, save_torch


def test_save_and_load_round_trip(tmp_path):
    path = save_torch({"kind": "x", "w": torch.arange(3)}, tmp_path / "a.pt")
    assert torch.equal(load_torch(path, kind="x")["w"], torch.arange(3))


def test_saved_files_are_readable_by_others_and_keep_their_mode(tmp_path):
    new = save_json({"a": 1}, tmp_path / "r.json")
    assert new.stat().st_mode & 0o777 == 0o644  # not mkstemp's private 0600
    new.chmod(0o664)
    save_json({"a": 2}, new)
    assert new.stat().st_mode & 0o777 == 0o664


def test_interrupted_save_keeps_previous_file(tmp_path):
    path = tmp_path / "model.pt"
    save_torch({"kind": "x", "v": 1}, path)

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with atomic_path(path) as tmp:
            tmp.write_bytes(b"half a checkpoint")
            raise Boom()
    assert load_torch(path, kind="x")["v"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no temp file left behind


def test_interrupted_first_save_leaves_nothing(tmp_path, monkeypatch):
    def failing_save(obj, f):
        open(f, "wb").write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(KeyboardInterrupt):
        save_torch({"kind": "x"}, tmp_path / "b.pt")
    assert list(tmp_path.iterdir()) == []


def test_corrupted_and_foreign_files_are_refused(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x00garbage")
    with pytest.raises(ArtifactError, match="not a valid Gem artifact"):
        load_torch(bad)
    foreign = save_torch({"kind": "other"}, tmp_path / "f.pt")
    with pytest.raises(ArtifactError, match="is not a 'gem-target' artifact"):
        load_torch(foreign, kind="gem-target")


class _Evil:
    def __reduce__(self):
        return (print, ("code ran",))


def test_pickled_code_is_never_executed(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"kind": "gem-target", "payload": _Evil()}, path)
    with pytest.raises(ArtifactError):
        load_torch(path, kind="gem-target")


def test_json_atomic(tmp_path):
    p = save_json({"a": 1}, tmp_path / "r.json")
    assert store.load_json(p) == {"a": 1}


def test_cache_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_CACHE_DIR", str(tmp_path / "c"))
    assert store.cache_dir() == tmp_path / "c"
    assert (tmp_path / "c").is_dir()
