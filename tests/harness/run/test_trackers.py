"""`mrtpo train --report-to`: each tracker gets metrics.jsonl's records.

Real runs of the loop (2 steps of a tiny model) log to each library, and the test reads what
the library wrote back with that library's own reader: tensorboard's event files, wandb's
offline run files, trackio's local store. No network: wandb runs with WANDB_MODE=offline,
trackio writes to a temporary directory. Each test skips where its package is not installed
(`pip install -e ".[trackers]"`; CI installs it).
"""
from __future__ import annotations

import json
import time

import harness_task
import pytest

from mrtpo.harness import ConfigError, TrainConfig, train
from mrtpo.harness.run.trackers import parse_report_to

harness_task.register()
SMALL = dict(task="harness-words", batch_prompts=2, num_generations=2, max_new_tokens=6, steps=2,
             verify_workers=0, lr=5e-3, lora_r=4, log_completions_every=0, save_every=0, mrtpo=False)


def _run(model_dir, out, **kw):
    train(TrainConfig(model=str(model_dir), output_dir=str(out), **{**SMALL, **kw}))
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_report_to_names():
    assert parse_report_to(["none"]) == [] and parse_report_to(None) == []
    assert parse_report_to(["tensorboard,wandb", "tensorboard"]) == ["tensorboard", "wandb"]
    with pytest.raises(ConfigError, match="--report-to mlflow: not a tracker"):
        TrainConfig(model="m", task="t", report_to=["mlflow"])


def test_a_missing_tracker_package_names_what_to_install(monkeypatch):
    import mrtpo.harness.run.trackers as trackers

    monkeypatch.setitem(trackers.PACKAGES, "trackio", "no_such_tracker_package")
    with pytest.raises(ConfigError, match=r'needs the no_such_tracker_package package.*pip install "mrtpo\[trackers\]"'):
        TrainConfig(model="m", task="t", report_to=["trackio"])


def test_tensorboard_event_file_holds_the_metrics(tiny_qwen2_dir, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records = _run(tiny_qwen2_dir, tmp_path / "run", report_to=["tensorboard"])
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for key in ("reward", "rewards/format/mean", "completions/mean_length", "num_tokens", "loss", "clip_ratio/low_min"):
        assert key in tags, key
        logged = [(e.step, e.value) for e in events.Scalars(key)]
        assert logged == [(r["step"], pytest.approx(r[key], rel=1e-6)) for r in records], key


def test_wandb_offline_run_holds_the_metrics(tiny_qwen2_dir, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "mrtpo-test")
    run = tmp_path / "run"
    records = _run(tiny_qwen2_dir, run, report_to=["wandb"])
    (offline,) = (run / "wandb").glob("offline-run-*")
    assert (run / ".wandb_run_id").read_text().strip() in offline.name
    (log,) = offline.glob("run-*.wandb")
    history, done = _wandb_history(log)
    for _ in range(60):  # wandb's writer process may still be flushing after finish() returned
        if done:
            break
        time.sleep(0.5)
        history, done = _wandb_history(log)
    assert [h["_step"] for h in history] == [1, 2]
    for h, record in zip(history, records):
        for key in ("reward", "rewards/format/mean", "num_tokens", "completions/mean_terminated_length"):
            assert h[key] == pytest.approx(record[key], rel=1e-6), key


def _wandb_history(path):
    """(history rows, whether the run's exit record is written) of an offline run's `.wandb`
    file: a LevelDB-style log (7-byte file header, 32 KiB blocks of [crc u32, length u16,
    type u8] chunks) of wandb's protobuf Records."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, buf, rows, done = path.read_bytes(), 32768, 7, b"", [], False
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the block's tail is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            done = done or record.WhichOneof("record_type") == "exit"
            if record.WhichOneof("record_type") == "history":
                row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
                rows.append({**row, "_step": row.get("_step", record.history.step.num)})
    return rows, done


def test_trackio_local_store_holds_the_metrics(tiny_qwen2_dir, tmp_path, monkeypatch):
    import importlib.util
    import sys

    if importlib.util.find_spec("trackio") is None:
        pytest.skip("trackio is not installed")
    store = tmp_path / "trackio"
    monkeypatch.setenv("TRACKIO_DIR", str(store))
    for name, module in list(sys.modules.items()):  # already imported (TRL imports it): its modules
        if name.startswith("trackio") and hasattr(module, "TRACKIO_DIR"):  # read the directory once
            monkeypatch.setattr(module, "TRACKIO_DIR", store)
    monkeypatch.setenv("TRACKIO_PROJECT", "mrtpo-test")
    records = _run(tiny_qwen2_dir, tmp_path / "run", report_to=["trackio"])
    from trackio.sqlite_storage import SQLiteStorage

    logs = SQLiteStorage.get_logs("mrtpo-test", "run")
    assert [row["step"] for row in logs] == [1, 2]
    for row, record in zip(logs, records):
        for key in ("reward", "rewards/format/mean", "num_tokens"):
            assert row[key] == pytest.approx(record[key], rel=1e-6), key
