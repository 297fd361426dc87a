"""The resident plugin's node facts (node.facts.read_node_facts with a FactsCache).

Read at every event: while no file changed, the last facts are given back as they are (nothing
built, checked or compared again); any change gives facts equal to what a read without the cache
gives now, with a new generation when they differ from the last.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict

import pytest

from mixed_cpus_hook.core.errors import HookError
from mixed_cpus_hook.node import facts as facts_module
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.node.facts import FactsCache, read_node_facts


def _online(node: Any, text: str) -> None:
    with open(os.path.join(node.sys_root, "devices/system/cpu/online"), "w", encoding="ascii") as f:
        f.write(text + "\n")


def _shared_file(node: Any, text: str) -> None:
    path = load_config(node.config_path).shared_cpus_file
    tmp = path + ".new"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(text + "\n")
    os.replace(tmp, path)  # a new inode, as an editor or an installer leaves it


# (what changes on the node, whether the facts' values change with it)
CHANGES: Dict[str, Any] = {
    "online-cpus-text": (lambda n: _online(n, "0-3,5"), True),
    "online-cpus-same-text": (lambda n: _online(n, "0-5"), False),
    "checkpoint-appears": (lambda n: n.write_checkpoint({"P": {"app": "2-3"}}), True),
    "shared-cpus-file": (lambda n: _shared_file(n, "0"), True),
    "shared-cpus-file-same-cpus": (lambda n: _shared_file(n, "0-1"), False),
}


@pytest.mark.parametrize("change, differs", CHANGES.values(), ids=list(CHANGES))
def test_a_change_is_read_and_a_quiet_node_costs_no_rebuild(fake_node: Callable[..., Any], change: Any,
                                                            differs: bool) -> None:
    node = fake_node(online="0-5", shared="0-1")
    config = load_config(node.config_path)
    cache = FactsCache()
    first = read_node_facts(config, cache)
    again = read_node_facts(config, cache)
    assert again is first  # nothing changed: the same facts, not rebuilt

    change(node)
    after = read_node_facts(config, cache)
    fresh = read_node_facts(config)  # no cache: everything read now
    assert after._replace(generation=0) == fresh
    assert (after.generation != first.generation) is differs
    assert read_node_facts(config, cache) is after  # quiet again


def test_another_config_object_is_decided_again(fake_node: Callable[..., Any]) -> None:
    """A configuration loaded again (the plugin re-reads it) is another object: facts built anew."""
    node = fake_node(online="0-5", shared="0-1")
    cache = FactsCache()
    first = read_node_facts(load_config(node.config_path), cache)
    second = read_node_facts(load_config(node.config_path), cache)
    assert second is not first and second == first  # same values: same generation


def test_the_shared_setting_is_parsed_once_per_text(fake_node: Callable[..., Any], monkeypatch: Any) -> None:
    node = fake_node(online="0-5", shared="0-1", config={"shared_cpus": "1"})
    config = load_config(node.config_path)
    calls = []
    real = facts_module.load_shared_cpus
    monkeypatch.setattr(facts_module, "load_shared_cpus", lambda c: calls.append(1) or real(c))
    cache = FactsCache()
    first = read_node_facts(config, cache)
    assert read_node_facts(config, cache) is first and len(calls) == 1
    assert first.shared == frozenset({1})


def test_a_refused_read_is_not_remembered(fake_node: Callable[..., Any]) -> None:
    """Shared CPUs that went offline fail every read until they are back (never the last good facts)."""
    node = fake_node(online="0-5", shared="0-1")
    config = load_config(node.config_path)
    cache = FactsCache()
    good = read_node_facts(config, cache)
    _online(node, "2-5")
    for _ in range(2):
        with pytest.raises(HookError, match="shared CPUs"):
            read_node_facts(config, cache)
    _online(node, "0-5")
    back = read_node_facts(config, cache)
    assert back == good._replace(generation=back.generation)


# (what changes in kubelet's checkpoint once one is there, whether the facts' values change with it)
CHECKPOINT_CHANGES: Dict[str, Any] = {
    "replaced-other-cpus": (lambda n: n.write_checkpoint({"P": {"app": "4-5"}}), True),
    "replaced-same-entries": (lambda n: n.write_checkpoint({"P": {"app": "2-3"}}), False),
    "removed": (lambda n: os.unlink(load_config(n.config_path).kubelet_state_file), True),
    "made-unreadable-json": (lambda n: open(load_config(n.config_path).kubelet_state_file, "w").write("{"), True),
}


@pytest.mark.parametrize("change, differs", CHECKPOINT_CHANGES.values(), ids=list(CHECKPOINT_CHANGES))
def test_a_checkpoint_change_is_read(fake_node: Callable[..., Any], change: Any, differs: bool) -> None:
    node = fake_node(online="0-5", shared="0-1")
    node.write_checkpoint({"P": {"app": "2-3"}})
    config = load_config(node.config_path)
    cache = FactsCache()
    first = read_node_facts(config, cache)
    assert read_node_facts(config, cache) is first
    change(node)
    after = read_node_facts(config, cache)
    assert after._replace(generation=0) == read_node_facts(config)
    assert (after.generation != first.generation) is differs
    assert read_node_facts(config, cache) is after


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoint", "no-checkpoint"])
@pytest.mark.parametrize("shared_setting", [None, "1"], ids=["shared-file", "shared-setting"])
def test_a_quiet_node_costs_its_reads_and_nothing_else(fake_node: Callable[..., Any], monkeypatch: Any,
                                                       shared_setting: Any, checkpoint: bool) -> None:
    """While nothing changed an event reads the online CPUs and stats the files, and looks up no
    cache entry: recheck gives the last facts back from those reads alone."""
    node = fake_node(online="0-5", shared="0-1", config={"shared_cpus": shared_setting} if shared_setting else None)
    if checkpoint:
        node.write_checkpoint({"P": {"app": "2-3"}})
    config = load_config(node.config_path)
    cache = FactsCache()
    first = read_node_facts(config, cache)
    looked_up = []
    real_get = FactsCache.get
    monkeypatch.setattr(FactsCache, "get", lambda self, *a: looked_up.append(a[0]) or real_get(self, *a))
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(facts_module.os, "stat", lambda p, **kw: stats.append(p) or real_stat(p, **kw))
    assert read_node_facts(config, cache) is first
    assert looked_up == []
    expected = [config.kubelet_state_file] + ([] if shared_setting else [config.shared_cpus_file])
    assert stats == expected
