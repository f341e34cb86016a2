"""qsa.fileio: output folders and atomic writes fail with the path, the reason and the fix."""

import errno

import pytest

from qsa import cli
from qsa.errors import QsaError
from qsa.fileio import OutputError, atomic_write_text, ensure_dir


def test_ensure_dir_creates_parents_and_names_a_file_in_the_way(tmp_path):
    assert ensure_dir(tmp_path / "a" / "b").is_dir()
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match=r"folder .*f/sub/deeper: .*f is a file, not a folder"):
        ensure_dir(tmp_path / "f" / "sub" / "deeper")
    assert isinstance(OutputError("x"), QsaError)
    assert isinstance(OutputError("x"), OSError)


def test_atomic_write_refuses_a_folder_and_a_file_in_the_way(tmp_path):
    with pytest.raises(OutputError, match="is a folder; give a file name"):
        atomic_write_text(tmp_path, "x")
    (tmp_path / "f").write_text("keep")
    with pytest.raises(OutputError, match=r"cannot write .*f/out.txt: .*f is a file, not a folder"):
        atomic_write_text(tmp_path / "f" / "out.txt", "x")
    assert (tmp_path / "f").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_cli_reports_a_file_system_error_on_a_path_without_a_traceback(monkeypatch, capsys):
    """Disk full (or a path removed under a running command): the message names the path."""

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/data/out/model.tflite")

    import qsa.commands.info

    monkeypatch.setattr(qsa.commands.info, "run", full)
    monkeypatch.delenv("QSA_DEBUG", raising=False)
    assert cli.main(["info"]) == 2
    err = capsys.readouterr().err
    assert "qsa info: error: /data/out/model.tflite: No space left on device" in err
    monkeypatch.setenv("QSA_DEBUG", "1")
    with pytest.raises(OSError):
        cli.main(["info"])
