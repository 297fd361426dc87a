"""One table of malformed inputs to ``apply``: each fails with one line naming what and where.

Every row builds a fake node with one asking container, breaks one thing, and runs the
fast path in-process. For every row: the exit code (1 with failure_policy fail; 0 with
ignore, except when the configuration itself cannot be trusted), exactly one line on
stderr, the same line in syslog, the expected text in it, and nothing written (no record,
every cgroup file unchanged, not even rewritten with the same value).
"""

from __future__ import annotations

import json
import os
import shutil
import syslog
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import pytest

PREFIX = "mixed-cpus.openshift.io"
POD_UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"  # FakeNode.add_container's default
OTHER_UID = "99999999-aaaa-bbbb-cccc-123456789abc"


class Case:
    """One asking container on a fake node, and how the hook will be run for it."""

    def __init__(self, node: Any, policy: str) -> None:
        self.node = node
        self.paths = node.add_container("abc", quota=200000, pod_quota=200000)
        self.state: Dict[str, Any] = node.load_json(self.paths["state"])
        self.raw_stdin: Optional[str] = None
        self.state_arg: Optional[str] = None
        self.config_arg = node.config_path
        self.settings: Dict[str, Any] = {"failure_policy": policy}
        self.raw_config: Optional[str] = None
        self.outside = os.path.join(node.root, "outside")

    # builders (each returns self, so that a row can be one lambda)
    def set_state(self, **changes: Any) -> "Case":
        self.state.update(changes)
        return self

    def drop_state(self, key: str) -> "Case":
        del self.state[key]
        return self

    def stdin(self, text: str) -> "Case":
        self.raw_stdin = text
        return self

    def annotate(self, key: str, value: str) -> "Case":
        self.state["annotations"][key] = value
        return self

    def spec(self, edit: Callable[[Dict[str, Any]], Any]) -> "Case":
        self.node.edit_spec(self.paths, edit)
        return self

    def spec_text(self, text: str) -> "Case":
        with open(os.path.join(self.paths["bundle"], "config.json"), "w", encoding="utf-8") as f:
            f.write(text)
        return self

    def cpu(self, **values: Any) -> "Case":
        return self.spec(lambda s: s["linux"]["resources"]["cpu"].update(values))

    def cgroups_path(self, value: Optional[str]) -> "Case":
        if value is None:
            return self.spec(lambda s: s["linux"].pop("cgroupsPath"))
        return self.spec(lambda s: s["linux"].update(cgroupsPath=value))

    def setting(self, **values: Any) -> "Case":
        self.settings.update(values)
        return self

    def config_text(self, text: str) -> "Case":
        self.raw_config = text
        return self

    def proc(self, text: str, pid: int = 4242) -> "Case":
        path = os.path.join(self.node.proc_root, str(pid), "cgroup")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="ascii") as f:
            f.write(text)
        return self.set_state(pid=pid)

    def write_file(self, path: str, text: str) -> "Case":
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return self

    def remove(self, path: str) -> "Case":
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
        return self

    def checkpoint(self, mine: Optional[str], **others: str) -> "Case":
        """kubelet's checkpoint (V2, kubelet's checksum) giving this container ``mine``, other pods' ``others``."""
        entries: Dict[str, Dict[str, str]] = {POD_UID: {"app": mine}} if mine is not None else {}
        for name, cpus in others.items():
            entries.setdefault(OTHER_UID, {})[name] = cpus
        self.node.write_checkpoint(entries)
        return self

    def kubelet_state(self, text: str) -> "Case":
        self.node.write_kubelet_state(text)
        return self

    def container_dirs(self) -> List[str]:
        n = self.node
        if n.version == 1:
            return [os.path.join(n.cgroup_root, h, self.paths["rel"]) for h in ("cpuset", "cpu,cpuacct")]
        return [os.path.join(n.cgroup_root, self.paths["rel"])]

    def move_cgroup_outside(self) -> "Case":
        """Replace the container's cgroup dirs by symlinks to copies outside the cgroup root."""
        for i, d in enumerate(self.container_dirs()):
            target = os.path.join(self.outside, str(i))
            shutil.copytree(d, target, symlinks=True)
            shutil.rmtree(d)
            os.symlink(target, d)
        return self

    def symlink_out(self, path: str) -> "Case":
        """Replace a cgroup file by a symlink to a copy outside the cgroup root."""
        target = os.path.join(self.outside, "target")
        os.makedirs(self.outside, exist_ok=True)
        shutil.copyfile(path, target)
        os.unlink(path)
        os.symlink(target, path)
        return self

    # running
    def prepare(self) -> None:
        if self.raw_config is not None:
            self.write_file(self.node.config_path, self.raw_config)
        else:
            self.node.configure(**self.settings)
            if self.settings.get("allowed_namespaces", ()) is None:  # None: leave the setting out
                with open(self.node.config_path, encoding="utf-8") as f:
                    kept = [line for line in f if not line.startswith("allowed_namespaces:")]
                self.write_file(self.node.config_path, "".join(kept))

    def argv(self) -> List[str]:
        return ["--config", self.config_arg, "apply"] + (["--state", self.state_arg] if self.state_arg else [])

    def stdin_text(self) -> str:
        return self.raw_stdin if self.raw_stdin is not None else json.dumps(self.state)

    def where(self) -> Dict[str, str]:
        n = self.node
        return {"bundle": self.paths["bundle"], "config": n.config_path, "shared_file": n.shared_file,
                "cgroup_root": os.path.realpath(n.cgroup_root), "proc_root": n.proc_root, "sys_root": n.sys_root,
                "state_dir": n.state_dir, "root": n.root, "outside": self.outside, "rel": self.paths["rel"],
                "dir": self.container_dirs()[0], "cpu_dir": self.container_dirs()[-1],
                "pod_quota_file": os.path.join(os.path.realpath(n.path(self.paths["pod_rel"], "")), n.quota_name()),
                "kubelet_state": n.kubelet_state}


class Row(NamedTuple):
    stage: str  # "state": before the config is read; "config": the config itself; "node": everything after
    build: Callable[[Case], Any]
    expect: str  # a substring of the message, with {placeholders} from Case.where()


ROWS: Dict[str, Row] = {
    # the OCI state on stdin (or --state)
    "state-not-json": Row("state", lambda c: c.stdin("{"), "invalid state: stdin: not JSON"),
    "state-empty": Row("state", lambda c: c.stdin(""), "invalid state: stdin: not JSON"),
    "state-array": Row("state", lambda c: c.stdin("[]"), "invalid state: stdin: must be a JSON object, not an array"),
    "state-missing-id": Row("state", lambda c: c.drop_state("id"),
                            "invalid state: stdin: required field 'id' is missing"),
    "state-id-climbs": Row("state", lambda c: c.set_state(id="../etc"),
                           "invalid state: stdin: field 'id': '../etc' is not a plain container id"),
    "state-id-slash": Row("state", lambda c: c.set_state(id="a/b"), "field 'id': 'a/b' is not a plain container id"),
    "state-id-dot": Row("state", lambda c: c.set_state(id="."), "field 'id': '.' is not a plain container id"),
    "state-id-newline": Row("state", lambda c: c.set_state(id="abc\n"),
                            "field 'id': 'abc\\n' is not a plain container id"),
    "state-pid-negative": Row("state", lambda c: c.set_state(pid=-1), "invalid state: stdin: field 'pid': -1 is not"),
    "state-pid-string": Row("state", lambda c: c.set_state(pid="12"),
                            "invalid state: stdin: field 'pid' must be an integer, not a string"),
    "state-bundle-relative": Row("state", lambda c: c.set_state(bundle="bundles/abc"),
                                 "invalid state: stdin: field 'bundle' must be an absolute path, not 'bundles/abc'"),
    "state-bundle-missing": Row("state", lambda c: c.drop_state("bundle"),
                                "invalid state: stdin: required field 'bundle' is missing"),
    "state-annotation-not-text": Row("state", lambda c: c.annotate("x", 1),
                                     "field 'annotations': value of 'x' must be a string, not an integer"),
    "state-file-missing": Row("state", lambda c: setattr(c, "state_arg", os.path.join(c.node.root, "nope.json")),
                              "invalid state: {root}/nope.json: cannot read: No such file or directory"),
    # the bundle's config.json
    "bundle-without-config-json": Row("node", lambda c: c.set_state(bundle=c.outside),
                                      "container abc: invalid config.json: {outside}/config.json: bundle has no"
                                      " config.json"),
    "config-json-not-json": Row("node", lambda c: c.spec_text("{"),
                                "container abc: invalid config.json: {bundle}/config.json: not JSON"),
    "config-json-array": Row("node", lambda c: c.spec_text("[]"),
                             "invalid config.json: {bundle}/config.json: must be a JSON object"),
    "cpus-reversed": Row("node", lambda c: c.cpu(cpus="3-1"),
                         "invalid cpulist: {bundle}/config.json: linux.resources.cpu.cpus: '3-1' is not a cpulist"
                         " (range '3-1' is reversed)"),
    "cpus-letter": Row("node", lambda c: c.cpu(cpus="a"),
                       "invalid cpulist: {bundle}/config.json: linux.resources.cpu.cpus: 'a' is not a cpulist"),
    "quota-not-a-number": Row("node", lambda c: c.cpu(quota="200000"),
                              "invalid config.json: {bundle}/config.json: field 'linux.resources.cpu.quota' must be"
                              " an integer"),
    # the request
    "annotation-yes": Row("node", lambda c: c.annotate(f"{PREFIX}/app", "yes"),
                          f"invalid request: pod ran/du-0: annotation {PREFIX}/app: value 'yes' is not 'enable'"),
    "annotation-names-cpus": Row("node", lambda c: c.annotate(f"{PREFIX}/app", "0-3"),
                                 f"annotation {PREFIX}/app: value '0-3' is not 'enable'"),
    "namespace-not-allowed": Row("node", lambda c: c.setting(allowed_namespaces=["kube-*", "ran-*"]),
                                 "refused: pod ran/du-0: namespace 'ran' may not ask for mixed CPUs: setting"
                                 " 'allowed_namespaces' in {config} lists only kube-*, ran-*; an admin must list it"
                                 " there"),
    "namespace-none-allowed": Row("node", lambda c: c.setting(allowed_namespaces=[]),
                                  "refused: pod ran/du-0: namespace 'ran' may not ask for mixed CPUs: setting"
                                  " 'allowed_namespaces' in {config} is empty"),
    "namespace-unlisted-by-default": Row("node", lambda c: c.setting(allowed_namespaces=None),
                                         "refused: pod ran/du-0: namespace 'ran' may not ask for mixed CPUs: setting"
                                         " 'allowed_namespaces' in {config} is empty (the default)"),
    # the node's shared and online CPUs
    "shared-cpu-offline": Row("node", lambda c: c.node.configure(shared="0-1,4-5"),
                              "invalid cpulist: {shared_file}: shared CPUs (offline or absent) 4-5 not in 0-3"),
    "shared-file-missing": Row("node", lambda c: c.remove(c.node.shared_file),
                               "config error: {shared_file}: shared-CPU file not found"),
    "shared-file-empty": Row("node", lambda c: c.write_file(c.node.shared_file, "# to be filled in\n"),
                             "config error: {shared_file}: no shared CPUs configured (the cpulist is empty)"),
    "shared-file-not-a-cpulist": Row("node", lambda c: c.write_file(c.node.shared_file, "0-1 2\n"),
                                     "invalid cpulist: {shared_file}: '0-1 2' is not a cpulist"),
    "shared-setting-not-a-cpulist": Row("node", lambda c: c.setting(shared_cpus="a"),
                                        "invalid cpulist: {config}: setting 'shared_cpus': 'a' is not a cpulist"),
    "online-cpus-unreadable": Row("node", lambda c: c.remove(os.path.join(c.node.sys_root, "devices/system/cpu/online")),
                                  "config error: {sys_root}/devices/system/cpu/online: cannot read the online CPUs"),
    # the configuration file itself
    "config-yaml-syntax": Row("config", lambda c: c.config_text("failure_policy: [ignore\n"),
                              "config error: {config}: not valid YAML at line 2"),
    "config-not-a-mapping": Row("config", lambda c: c.config_text("- shared_cpus\n"),
                                "config error: {config}: must be a mapping of settings, not an array"),
    "config-unknown-key": Row("config", lambda c: c.setting(shared_cpu="0-1"),
                              "config error: {config}: unknown setting 'shared_cpu'"),
    "config-policy-maybe": Row("config", lambda c: c.setting(failure_policy="maybe"),
                               "config error: {config}: setting 'failure_policy': 'maybe' is not one of fail, ignore"),
    "config-prefix-crio": Row("config", lambda c: c.setting(annotation_prefix="cpu-shared.crio.io"),
                              "config error: {config}: setting 'annotation_prefix': 'cpu-shared.crio.io' belongs to"
                              " CRI-O"),
    "config-state-dir-relative": Row("config", lambda c: c.setting(state_dir="run/hook"),
                                     "config error: {config}: field 'state_dir' must be an absolute path"),
    "config-file-missing": Row("config", lambda c: setattr(c, "config_arg", os.path.join(c.node.root, "nope.yaml")),
                               "config error: {root}/nope.yaml: configuration file not found"),
    # finding the cgroup
    "cgroups-path-climbs": Row("node", lambda c: c.cgroups_path("../../etc"),
                               "cgroup error: {cgroup_root}: container cgroup '../../etc' climbs out of its hierarchy"),
    "cgroups-path-bad-systemd-form": Row("node", lambda c: c.cgroups_path("a:b"),
                                         "cgroup error: {bundle}/config.json: linux.cgroupsPath 'a:b' is neither a path nor"
                                         " slice:prefix:name"),
    "no-pid-no-cgroups-path": Row("node", lambda c: c.cgroups_path(None),
                                  "cgroup error: {bundle}/config.json: process 0 is gone and there is no"
                                  " linux.cgroupsPath"),
    "cgroup-not-found": Row("node", lambda c: [c.remove(d) for d in c.container_dirs()],
                            "cgroup error: {dir}: container cgroup not found (from linux.cgroupsPath /{rel})"),
    "cgroup-root-missing": Row("node", lambda c: c.setting(cgroup_root=os.path.join(c.node.root, "no-cgroup")),
                               "cgroup error: {root}/no-cgroup: no cgroup v1 cpuset hierarchy and no cgroup v2"),
    "cgroup-symlinked-outside-root": Row("node", lambda c: c.move_cgroup_outside(),
                                         "resolves to {outside}/0, outside the cgroup root"),
    "proc-cgroup-climbs": Row("node", lambda c: c.proc("12:cpuset:/../../etc\n5:cpu,cpuacct:/../../etc\n0::/../../etc\n"),
                              "cgroup error: {cgroup_root}: container cgroup '/../../etc' climbs out of its hierarchy"),
    "proc-root-cgroup": Row("node", lambda c: c.proc("12:cpuset:/\n5:cpu,cpuacct:/\n0::/\n"),
                            "cgroup error: {proc_root}/4242/cgroup: the container is in the root cgroup; refusing to"
                            " change the whole node"),
    "proc-no-cpu-controllers": Row("node", lambda c: c.proc("3:memory:/x\n"),
                                   "cgroup error: {proc_root}/4242/cgroup: process 4242 is in no cgroup of the"
                                   " cpuset/cpu controllers"),
    "cgroup-quota-garbage": Row("node", lambda c: c.node.write(c.paths["rel"], c.node.quota_name(), "lots"),
                                "cgroup error: {cpu_dir}"),
    "cgroup-cpuset-garbage": Row("node", lambda c: c.node.write(c.paths["rel"], "cpuset.cpus", "x"),
                                 "invalid cpulist: {dir}/cpuset.cpus: 'x' is not a cpulist"),
    # the state directory
    "state-dir-is-a-file": Row("node", lambda c: [c.write_file(os.path.join(c.node.root, "afile"), ""),
                                                  c.setting(state_dir=os.path.join(c.node.root, "afile"))],
                               "record error: {root}/afile: cannot use the state directory"),
    "record-corrupt": Row("node", lambda c: c.write_file(os.path.join(c.node.state_dir, "containers/abc.json"), "{"),
                          "record error: {state_dir}/containers/abc.json: invalid record: not JSON"),
    "record-of-another-schema": Row("node", lambda c: c.write_file(os.path.join(c.node.state_dir, "containers/abc.json"),
                                                                   '{"schema": 99}'),
                                    "record error: {state_dir}/containers/abc.json: invalid record: not a schema 1 or 2 record"),
    # issue 9: a state naming another process, a pod that is not the annotations', symlinks planted below
    "proc-pid-1-in-sshd": Row("node", lambda c: c.proc("12:cpuset:/system.slice/sshd.service\n"
                                                       "5:cpu,cpuacct:/system.slice/sshd.service\n"
                                                       "0::/system.slice/sshd.service\n", pid=1),
                              "cgroup error: {bundle}/config.json: process 1 is in /system.slice/sshd.service"
                              " ({proc_root}/1/cgroup), not in /{rel}, the cgroup linux.cgroupsPath /{rel} names:"
                              " the state names another process; refusing"),
    "proc-in-another-pods-container": Row(
        "node", lambda c: [c.node.add_container("xyz", pod_uid="99999999-aaaa-bbbb-cccc-123456789abc"),
                           c.proc("12:cpuset:/kubepods/pod99999999-aaaa-bbbb-cccc-123456789abc/crio-xyz\n"
                                  "5:cpu,cpuacct:/kubepods/pod99999999-aaaa-bbbb-cccc-123456789abc/crio-xyz\n"
                                  "0::/kubepods/pod99999999-aaaa-bbbb-cccc-123456789abc/crio-xyz\n")],
        "process 4242 is in /kubepods/pod99999999-aaaa-bbbb-cccc-123456789abc/crio-xyz ({proc_root}/4242/cgroup),"
        " not in /{rel}, the cgroup linux.cgroupsPath /{rel} names"),
    "pod-uid-of-another-pod": Row("node", lambda c: c.annotate("io.kubernetes.pod.uid",
                                                               "99999999-aaaa-bbbb-cccc-123456789abc"),
                                  "is not the cgroup of pod 99999999-aaaa-bbbb-cccc-123456789abc that its annotations"
                                  " name"),
    "pod-quota-file-symlinked-outside": Row("node", lambda c: c.symlink_out(c.node.path(c.paths["pod_rel"],
                                                                                         c.node.quota_name())),
                                            "write refused: {pod_quota_file}: is a symbolic link (to {outside}/"
                                            "target); a cgroup file never is: refusing to write through it"),
    # issue 9: kubelet's checkpoint names this container's CPUs, and they cannot be used
    "checkpoint-entry-offline": Row("node", lambda c: c.checkpoint("4-5"),
                                    "invalid cpulist: {kubelet_state}: kubelet checkpoint entry " + POD_UID +
                                    "/app (offline CPUs) 4-5 not in 0-3"),
    "checkpoint-entry-also-anothers": Row("node", lambda c: c.checkpoint("2-3", other="3"),
                                          "invalid kubelet state: {kubelet_state}: assigns 2-3 to this container, but"
                                          " CPUs 3 also to entries." + OTHER_UID + ".other: kubelet never does, not"
                                          " used"),
}

# -- hostile shapes and sizes (issue 10): deep nesting, special files, caps, long ids, odd names -----
# Nesting far past the interpreter's recursion limit: the JSON decoder and PyYAML's composer
# recurse once per level.
DEEP = 100000
SPEC_CAP, CONFIG_CAP, SHARED_CAP = 16 << 20, 1 << 20, 64 << 10


def _fifo(path: str) -> None:
    if os.path.lexists(path):
        os.unlink(path)
    os.mkfifo(path)


def _symlink(target: str, path: str) -> None:
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)


def _sparse(path: str, size: int) -> None:
    """A file of ``size`` bytes that costs no disk: the size alone must get it refused."""
    with open(path, "wb") as f:
        f.truncate(size)


def _spec_path(c: Case) -> str:
    return os.path.join(c.paths["bundle"], "config.json")


def _config_elsewhere(c: Case, name: str, make: Callable[[str], None]) -> None:
    c.config_arg = os.path.join(c.node.root, name)
    make(c.config_arg)


ROWS.update({
    "state-nested-deeply": Row("state", lambda c: c.stdin("[" * DEEP),
                               "invalid state: stdin: not JSON the hook accepts (nested too deeply)"),
    "state-annotation-nested-deeply": Row("state", lambda c: c.stdin('{"ociVersion": "1.0.2", "id": "abc", "bundle": '
                                                                     '"/b", "annotations": {"x": ' + "[" * DEEP),
                                          "invalid state: stdin: not JSON the hook accepts (nested too deeply)"),
    "state-id-too-long-for-a-file-name": Row("state", lambda c: c.set_state(id="a" * 243),
                                             "invalid state: stdin: field 'id': 243 characters, more than the 242 a"
                                             " file name in the state directory can hold"),
    "config-json-nested-deeply": Row("node", lambda c: c.spec_text('{"annotations": ' + "[" * DEEP),
                                     "invalid config.json: {bundle}/config.json: not JSON the hook accepts (nested too"
                                     " deeply)"),
    "config-json-fifo": Row("node", lambda c: _fifo(_spec_path(c)),
                            "invalid config.json: {bundle}/config.json: not a regular file (a FIFO)"),
    "config-json-dev-zero": Row("node", lambda c: _symlink("/dev/zero", _spec_path(c)),
                                "invalid config.json: {bundle}/config.json: not a regular file (a character device)"),
    "config-json-too-large": Row("node", lambda c: _sparse(_spec_path(c), SPEC_CAP + 1),
                                 f"invalid config.json: {{bundle}}/config.json: larger than {SPEC_CAP} bytes"
                                 f" ({SPEC_CAP + 1})"),
    "config-yaml-nested-deeply": Row("config", lambda c: c.config_text("failure_policy: ignore\nx: " + "[" * DEEP),
                                     "config error: {config}: not valid YAML: nested too deeply"),
    "config-yaml-fifo": Row("config", lambda c: _config_elsewhere(c, "config-fifo.yaml", _fifo),
                            "config error: {root}/config-fifo.yaml: configuration file is not a regular file (a FIFO)"),
    "config-yaml-dev-zero": Row("config", lambda c: setattr(c, "config_arg", "/dev/zero"),
                                "config error: /dev/zero: configuration file is not a regular file (a character"
                                " device)"),
    "config-yaml-too-large": Row("config", lambda c: _config_elsewhere(c, "big.yaml",
                                                                       lambda p: _sparse(p, CONFIG_CAP + 1)),
                                 f"config error: {{root}}/big.yaml: configuration file is larger than {CONFIG_CAP}"
                                 f" bytes ({CONFIG_CAP + 1})"),
    "shared-file-fifo": Row("node", lambda c: _fifo(c.node.shared_file),
                            "config error: {shared_file}: shared-CPU file is not a regular file (a FIFO)"),
    "shared-file-dev-zero": Row("node", lambda c: _symlink("/dev/zero", c.node.shared_file),
                                "config error: {shared_file}: shared-CPU file is not a regular file (a character"
                                " device)"),
    "shared-file-too-large": Row("node", lambda c: _sparse(c.node.shared_file, SHARED_CAP + 1),
                                 f"config error: {{shared_file}}: shared-CPU file is larger than {SHARED_CAP} bytes"
                                 f" ({SHARED_CAP + 1})"),
    # Pod names are not validated (kubelet's business); in a message they are escaped, so that
    # syslog's UTF-8 encoding and C strings take the line (the real syslog: test_hostile_names_*).
    "pod-name-lone-surrogate": Row("node", lambda c: [c.annotate("io.kubernetes.pod.name", "du-\udc80"),
                                                      c.annotate(f"{PREFIX}/app", "yes")],
                                   "invalid request: pod ran/du-\\udc80: annotation mixed-cpus.openshift.io/app:"
                                   " value 'yes' is not 'enable'"),
    "pod-name-nul": Row("node", lambda c: [c.annotate("io.kubernetes.pod.name", "du-\x00"),
                                           c.annotate(f"{PREFIX}/app", "yes")],
                        "invalid request: pod ran/du-\\x00: annotation mixed-cpus.openshift.io/app:"),
})

def params() -> List[Any]:
    """Every row with both policies; rows about the cgroups on v1 and v2, the others (which
    fail before any cgroup is looked at) on v1 only."""
    out = []
    for name, row in ROWS.items():
        for version in ((1, 2) if row.stage == "node" else (1,)):
            for policy in ("fail", "ignore"):
                out.append(pytest.param(row, version, policy, id=f"{name}-v{version}-{policy}"))
    return out


def test_the_table_is_big_enough() -> None:
    assert len(ROWS) >= 25


@pytest.mark.parametrize("row,version,policy", params())
def test_malformed_input(fake_node: Callable[..., Any], run_hook: Callable[..., Any], row: Row, version: int,
                         policy: str) -> None:
    node = fake_node(version=version)
    case = Case(node, policy)
    row.build(case)
    case.prepare()
    before = node.freeze()
    outside_before = {p: open(p, "rb").read() for p in _files(case.outside)}

    result = run_hook(case.argv(), stdin=case.stdin_text())

    ignored = policy == "ignore" and row.stage != "config"
    assert result.code == (0 if ignored else 1), result.err
    assert result.out == ""
    lines = result.err_lines
    assert len(lines) == 1, result.err
    assert lines[0].startswith("mixed-cpus-hook: error: ")
    message = lines[0][len("mixed-cpus-hook: error: "):]
    assert row.expect.format(**case.where()) in message
    assert message.endswith(" (ignored: failure_policy is ignore)") is ignored
    assert result.syslog == [(syslog.LOG_ERR, message)]
    # nothing written: no record, no cgroup file changed or even rewritten
    assert node.changes(before) == []
    assert {p: open(p, "rb").read() for p in _files(case.outside)} == outside_before


def _files(top: str) -> List[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(top) for f in files]


@pytest.mark.parametrize("name,shown", [("du-\udc80", "du-\\udc80"), ("du-\x00", "du-\\x00")],
                         ids=["lone-surrogate", "nul"])
def test_hostile_pod_names_reach_the_real_syslog(fake_node: Callable[..., Any], run_exe: Callable[..., Any],
                                                 monkeypatch: pytest.MonkeyPatch, name: str, shown: str) -> None:
    """The hook as a process, with the real syslog module: one escaped line and exit 1, no traceback.

    (syslog.syslog encodes its argument as UTF-8 and as a C string: a lone surrogate raised
    UnicodeEncodeError and a NUL ValueError, out of the error handler itself.)
    """
    monkeypatch.delenv("MIXED_CPUS_HOOK_NO_SYSLOG", raising=False)
    case = Case(fake_node(), "fail")
    case.annotate("io.kubernetes.pod.name", name).annotate(f"{PREFIX}/app", "yes")
    case.prepare()
    result = run_exe(case.argv(), stdin=case.stdin_text())
    assert result.code == 1 and result.out == "", result.err
    assert result.err_lines == [f"mixed-cpus-hook: error: container abc: invalid request: pod ran/{shown}: "
                                f"annotation {PREFIX}/app: value 'yes' is not 'enable'"], result.err


def test_the_longest_id_fits_the_state_directory(fake_node: Callable[..., Any], run_hook: Callable[..., Any]) -> None:
    """242 characters (the limit of the state-id-too-long row) apply and release like any id."""
    node = fake_node()
    cid = "a" * 242
    paths = node.add_container(cid, quota=200000, pod_quota=200000)
    for command in ("apply", "release"):
        result = run_hook(["--config", node.config_path, command, "--state", paths["state"]])
        assert result.code == 0 and result.err == "", result.err
        assert list(node.records("containers")) == ([cid] if command == "apply" else [])


# -- kubelet's checkpoint: bad input that apply survives (issue 9) ---------------------------------
# kubelet writes its checkpoint atomically, so a file that is not one of kubelet's (corrupt,
# another shape, a checksum that does not match, not a regular file, another policy) is refused
# for the run with a warning naming the file, and the container is applied as without it
# (config.json's cpus): failing container starts for a file the hook only reads would stop the
# node. A checkpoint entry on the shared CPUs is a conflict (nothing written); a cpuset widened
# by a foreign writer is shrunk back to the entry ∪ shared. All exit 0 under both policies: the
# container is in the state it must be in, there is nothing a failure would make safer.

class WarnRow(NamedTuple):
    build: Callable[[Case], Any]
    expect: str  # the whole warning, with {placeholders} from Case.where()
    on_stderr: bool  # also on stderr (the run's own note), or only in the journal (the decision's)
    cpuset: Optional[str]  # the container's cpuset afterwards; None: nothing written at all
    source: str = "spec"  # the record's exclusive_source
    written_over: str = "2-3"  # the cpuset the hook found


REFUSED = "kubelet checkpoint refused, using the records and cgroups instead: {kubelet_state}: "

WARN_ROWS: Dict[str, WarnRow] = {
    "checkpoint-not-json": WarnRow(lambda c: c.kubelet_state('{"policyName": "static", "defaultCpuSet": "0-'),
                                   REFUSED + "not valid JSON (Unterminated string starting at: line 1 column 43 (char"
                                   " 42))", True, "0-3"),
    "checkpoint-empty": WarnRow(lambda c: c.kubelet_state(""),
                                REFUSED + "not valid JSON (Expecting value: line 1 column 1 (char 0))", True, "0-3"),
    "checkpoint-foreign-shape": WarnRow(lambda c: c.kubelet_state('{"apiVersion": "v1", "kind": "Pod"}'),
                                        REFUSED + "field 'policyName' is missing (not a CPU manager checkpoint)", True,
                                        "0-3"),
    "checkpoint-array": WarnRow(lambda c: c.kubelet_state("[]"), REFUSED + "must be a JSON object, not an array", True,
                                "0-3"),
    "checkpoint-entries-not-an-object": WarnRow(
        lambda c: c.kubelet_state('{"policyName": "static", "defaultCpuSet": "0-1", "entries": ["2-3"]}'),
        REFUSED + "field 'entries' must be an object, not an array", True, "0-3"),
    "checkpoint-entry-not-a-cpulist": WarnRow(
        lambda c: c.kubelet_state('{"policyName": "static", "defaultCpuSet": "0-1", "entries": {"' + POD_UID +
                                  '": {"app": "two"}}}'),
        REFUSED + "field 'entries." + POD_UID + ".app': 'two' is not a cpulist", True, "0-3"),
    "checkpoint-checksum-mismatch": WarnRow(
        lambda c: c.node.write_checkpoint({POD_UID: {"app": "2"}}, checksum=12345),
        REFUSED + "field 'checksum': 12345 does not match the content (", True, "0-3"),
    "checkpoint-fifo": WarnRow(lambda c: [os.makedirs(os.path.dirname(c.node.kubelet_state), exist_ok=True),
                                          _fifo(c.node.kubelet_state)],
                               REFUSED + "not kubelet's CPU manager state: not a regular file (a FIFO)", True, "0-3"),
    "checkpoint-symlink": WarnRow(lambda c: [c.checkpoint("2"), os.rename(c.node.kubelet_state, c.outside),
                                             os.symlink(c.outside, c.node.kubelet_state)],
                                  REFUSED + "is a symbolic link; kubelet writes a regular file", True, "0-3"),
    "checkpoint-policy-none": WarnRow(lambda c: c.node.write_checkpoint({}, policy="none"),
                                      "kubelet checkpoint {kubelet_state}: policy 'none', not 'static': not used", True,
                                      "0-3"),
    "checkpoint-entry-on-the-shared-cpus": WarnRow(
        lambda c: c.checkpoint("1-2"), "container abc: kubelet's checkpoint assigns 1-2, which overlaps the shared CPUs"
        " 0-1 (are they in kubelet's reservedSystemCPUs?)", True, None),
    # config.json and the checkpoint say 3; someone widened the cgroup to 2-3 before the hook ran
    "cpuset-widened-by-a-foreign-writer": WarnRow(
        lambda c: [c.cpu(cpus="3"), c.node.write(c.paths["rel"], "cpuset.cpus", "2-3"), c.checkpoint("3")],
        "container abc: cgroup held 2-3: CPUs 2 are not this container's in kubelet's checkpoint, refused", False,
        "0-1,3", "kubelet-checkpoint", "2-3"),
}


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
@pytest.mark.parametrize("policy", ["fail", "ignore"])
@pytest.mark.parametrize("row", list(WARN_ROWS.values()), ids=list(WARN_ROWS))
def test_kubelet_checkpoint_apply_survives(fake_node: Callable[..., Any], run_hook: Callable[..., Any], row: WarnRow,
                                           version: int, policy: str) -> None:
    node = fake_node(version=version)
    case = Case(node, policy)
    row.build(case)
    case.prepare()
    before = node.freeze()

    result = run_hook(case.argv(), stdin=case.stdin_text())

    assert result.code == 0, result.err
    message = row.expect.format(**case.where())
    warned = [m for p, m in result.syslog if p == syslog.LOG_WARNING]
    assert len(warned) == 1 and warned[0].startswith(message), result.syslog
    assert not [m for p, m in result.syslog if p == syslog.LOG_ERR]
    assert result.err_lines == ([f"mixed-cpus-hook: warning: {warned[0]}"] if row.on_stderr else []), result.err
    if row.cpuset is None:
        assert node.changes(before) == []
        return
    assert node.read(case.paths["rel"], "cpuset.cpus") == row.cpuset
    assert f"cpuset.cpus: {row.written_over} -> {row.cpuset} " in result.out
    assert node.records("containers")["abc"]["exclusive_source"] == row.source
