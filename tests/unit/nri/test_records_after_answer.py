"""The plugin's records are journaled until its answer is sent (store/records.py, "the journal"):
what the engine does when writing them then fails, and what the next event does."""

from __future__ import annotations

import os
import shutil
from typing import Any

from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri.plugin import defer_writes
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node.config import load_config

from .peer import create_request

APP = "a1" * 32


def test_records_that_cannot_be_written_after_the_answer_are_logged_counted_and_written_later(
        node: Any, reporter: Any) -> None:
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    h = Handlers(load_config(node.config_path), reporter.reporter)
    defer_writes(h.engine)
    resp = h.create_container(create_request(APP))
    assert resp.adjust.linux.resources.cpu.cpus == "0-3"  # answered: the records are only journaled
    containers = os.path.join(node.state_dir, "containers")
    shutil.rmtree(containers, ignore_errors=True)
    with open(containers, "w", encoding="utf-8"):  # a file where the records' directory is to be
        pass
    h.after_answer()
    assert "nri: saving the records after the answer: " in reporter.stream.getvalue()
    assert h.engine.telemetry.snapshot().errors.get(("records", "record_error")) == 1
    assert os.path.getsize(os.path.join(node.state_dir, "lock")) > 0  # the journal waits
    os.unlink(containers)
    update = api.UpdateContainerRequest(container=api.Container(id=APP))
    update.linux_resources.cpu.cpus = "2-3"
    h.update_container(update)  # the next event's lock: the journal first, then the container is tracked
    h.after_answer()
    assert set(node.records("containers")) == {APP}
    assert os.path.getsize(os.path.join(node.state_dir, "lock")) == 0
