"""``mixed-cpus-hook check``: the node doctor.

Two halves: ``read_facts`` reads files and asks programs (kubelet's and CRI-O's configuration,
the CPU manager's state, the hooks.d files, systemctl, sysfs) and returns plain JSON-able data;
``compute_findings`` is pure and turns those facts into findings, each with the fix. Tests feed
either half directly, or both through fake nodes on disk.

Imported only by ``cli.py`` (never on the hook's createRuntime path): it may use PyYAML and psutil.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from ..node.config import Config, is_pool, load_config, load_reserved_cpus, load_shared_cpus, read_online_cpus
from ..core.cdi import CPU_DRIVER_KIND
from ..core.cpuset import format_cpulist, parse_cpulist
from ..core.errors import HookError
from .machineconfig import DEFAULT_UNITS, PRESET_PATH, parse_preset

# Each mode's preset, as the packages (and `make install MODE=...`) install them.
PRESET_PATHS = (PRESET_PATH, os.path.join(os.path.dirname(PRESET_PATH), "90-mixed-cpus-hook-nri.preset"))

OK, WARNING, ERROR = "ok", "warning", "error"
STATUS_ORDER = {OK: 0, WARNING: 1, ERROR: 2}

DEFAULT_KUBELET_CONFIGS = ("/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/config.yaml")
DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"
DEFAULT_CRIO_CONFIG = "/etc/crio/crio.conf"
DEFAULT_CRIO_CONFIG_DIR = "/etc/crio/crio.conf.d"
DEFAULT_CONTAINERD_CONFIG = "/etc/containerd/config.toml"
DEFAULT_NRI_SOCKET = "/var/run/nri/nri.sock"  # containerd/nri pkg/api: the runtime's socket for plugins
NRI_UNIT = "mixed-cpus-hook-nri.service"
# containerd/nri: where the runtime starts pre-installed plugins (containerd plugin_path, CRI-O nri_plugin_dir)
DEFAULT_NRI_PLUGIN_DIR = "/opt/nri/plugins"
DRA_DRIVER = "the CPU DRA driver's NRI half (kubernetes-sigs/dra-driver-cpu)"
NRI_POLICY = "an NRI resource policy of containers/nri-plugins (topology-aware, balloons, template)"
# NRI plugins that set containers' cpusets, by program or plugin name (exact, or a prefix ending in "-"): the
# driver's binary is /dracpu and it registers as 00-dra.cpu; nri-plugins ship nri-resource-policy-<policy>.
CPU_PLUGINS = (("dracpu", DRA_DRIVER), ("dra.cpu", DRA_DRIVER), ("dra-driver-cpu", DRA_DRIVER),
               ("nri-resource-policy-", NRI_POLICY), ("topology-aware", NRI_POLICY), ("balloons", NRI_POLICY))
DEFAULT_HOOKS_DIRS = ("/usr/share/containers/oci/hooks.d",)
DEFAULT_CRIO_CGROUP_MANAGER = "systemd"
DEFAULT_KUBELET_CGROUP_DRIVER = "cgroupfs"  # KubeletConfiguration's default
SYSTEMD_RUN_DIR = "/run/systemd/system"  # exists iff systemd is PID 1 (sd_booted)
HOOK_NAME = "mixed-cpus-hook"
UNIT_PROPERTIES = ("LoadState", "UnitFileState", "ActiveState", "SubState", "Type", "Result")
DRAIN_AND_RESET = ("drain the node, stop kubelet, remove {state}, start kubelet, uncordon "
                   "(kubelet re-plans exclusive CPUs only from an empty state file)")


class Finding(NamedTuple):
    """One line of the doctor's report: ``fix`` says what to do (empty when all is well)."""

    check: str
    status: str  # ok | warning | error
    message: str
    fix: str = ""


class Paths(NamedTuple):
    """Where ``read_facts`` looks. None means: from the running process's command line, else the default."""

    config: Optional[str] = None
    kubelet_config: Optional[str] = None
    kubelet_state: Optional[str] = None
    crio_config: Optional[str] = None
    crio_config_dir: Optional[str] = None
    hooks_dirs: Tuple[str, ...] = ()
    preset: Optional[str] = None  # None: the installed presets of either mode (PRESET_PATHS)
    systemctl: Optional[str] = None  # None: "systemctl", and only when systemd is PID 1
    skip_units: bool = False
    detect: bool = True  # read kubelet's and CRI-O's command lines (psutil) for paths not given
    systemd_run_dir: str = SYSTEMD_RUN_DIR
    containerd_config: Optional[str] = None  # None: containerd's --config, else DEFAULT_CONTAINERD_CONFIG
    nri_socket: Optional[str] = None  # None: the runtime's configured socket, else DEFAULT_NRI_SOCKET
    nri_plugin_dir: Optional[str] = None  # None: the runtime's configured plugin dir, else DEFAULT_NRI_PLUGIN_DIR
    probe: bool = True  # run the thread-affinity probe (a scratch cgroup; the verdict saved in the state dir)


# ---------------------------------------------------------------------------------------------
# Reading: files and programs -> facts (plain data)
# ---------------------------------------------------------------------------------------------

def process_args(name: str) -> Optional[List[str]]:
    """The command line of the first running process called ``name`` (psutil), or None."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return None
    for proc in psutil.process_iter(["name", "cmdline"]):
        info = getattr(proc, "info", {}) or {}
        cmd = info.get("cmdline") or []  # empty for kernel threads, zombies, or when not allowed
        if cmd and (info.get("name") == name or os.path.basename(cmd[0]) == name):
            return list(cmd)
    return None


def flag_values(argv: Sequence[str], *names: str) -> List[str]:
    """Values of ``--flag V``, ``--flag=V`` (and short ``-c V``) in a command line, in order."""
    values = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        for name in names:
            if arg == name and i + 1 < len(argv):
                values.append(argv[i + 1])
                i += 1
                break
            if arg.startswith(name + "="):
                values.append(arg[len(name) + 1:])
                break
        i += 1
    return values


def _last(values: List[str]) -> Optional[str]:
    return values[-1] if values else None


def _read_text(path: str, limit: int = 4 << 20) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read(limit)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


class TomlError(ValueError):
    pass


def _toml_module() -> Any:
    """The TOML reader: tomllib (Python 3.11+), else tomli (RHEL 9: python3-tomli), else toml
    (RHEL 9: python3-toml 0.10.2). Each raises a ValueError subclass for bad input."""
    try:
        import tomllib as mod  # type: ignore[import-not-found]  # novermin (guarded: 3.11+)
    except ImportError:
        try:
            import tomli as mod
        except ImportError:
            import toml as mod
    return mod


def parse_toml(text: str) -> Dict[str, Any]:
    """A TOML document as nested dicts; raises TomlError("line N: what")."""
    try:
        mod = _toml_module()
    except ImportError:
        raise TomlError("no TOML parser (install python3-tomli, or use Python 3.11+)") from None
    try:
        return mod.loads(text)
    except ValueError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        # tomllib/tomli: "... (at line 3, column 7)"; toml: "... (line 3 column 7 char 20)"
        m = re.search(r"\s*\((?:at )?line (\d+),? column (\d+)[^)]*\)\s*$", msg)
        if m:
            msg = f"line {m.group(1)}, column {m.group(2)}: {msg[:m.start()]}"
        raise TomlError(msg) from None


def toml_get(doc: Dict[str, Any], dotted: str) -> Any:
    """``doc["crio"]["runtime"]["hooks_dir"]`` for ``"crio.runtime.hooks_dir"``; None when absent."""
    cur: Any = doc
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _yaml_load(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def read_config_facts(paths: Paths, environ: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, Any], Config]:
    """The hook's configuration and shared CPUs; returns the facts and the Config to use further."""
    facts: Dict[str, Any] = {"source": None, "error": None}
    try:
        config = load_config(paths.config, environ=environ)
        facts["source"] = config.source
    except HookError as exc:
        facts["error"] = str(exc)
        config = Config()
    facts.update(annotation_prefix=config.annotation_prefix, sys_root=config.sys_root,
                 cgroup_root=config.cgroup_root, pool=is_pool(config), exclusive_source=config.exclusive_source,
                 reserved_cpus=config.reserved_cpus)
    return facts, config


def read_cpu_facts(config: Config, config_ok: bool) -> Dict[str, Any]:
    """The shared CPUs (with shared_cpus: pool, the reserved ones instead: the pool follows the
    allocations), the online and isolated CPUs, the kernel's release (thread pins)."""
    facts: Dict[str, Any] = {"shared": None, "shared_where": None, "shared_error": None, "online": None,
                             "online_error": None, "isolated": None, "isolated_error": None,
                             "pool": config_ok and is_pool(config), "reserved": None, "kernel": os.uname().release}
    if facts["pool"]:
        try:
            facts["reserved"] = format_cpulist(load_reserved_cpus(config))
        except HookError as exc:
            facts["shared_error"] = str(exc)
    elif config_ok:
        try:
            shared, where = load_shared_cpus(config)
            facts["shared"], facts["shared_where"] = format_cpulist(shared), where
        except HookError as exc:
            facts["shared_error"] = str(exc)
    try:
        facts["online"] = format_cpulist(read_online_cpus(config.sys_root))
    except HookError as exc:
        facts["online_error"] = str(exc)
    isolated = os.path.join(config.sys_root, "devices/system/cpu/isolated")
    try:
        facts["isolated"] = format_cpulist(parse_cpulist(_read_text(isolated), isolated))
    except FileNotFoundError:
        facts["isolated"] = ""
    except (OSError, HookError) as exc:
        facts["isolated_error"] = f"{isolated}: {_error_text(exc)}"
    return facts


def read_kubelet_facts(paths: Paths) -> Dict[str, Any]:
    """KubeletConfiguration (the subset we judge), kubelet's overriding flags, the CPU manager state."""
    argv = process_args("kubelet") if paths.detect else None
    facts: Dict[str, Any] = {"running": argv is not None, "config_path": None, "config_source": None,
                             "config_error": None, "config": None, "flags": {}, "state_path": None,
                             "state_source": None, "state_error": None, "state": None}
    flags = {}
    if argv:
        for key, flag in (("cpuManagerPolicy", "--cpu-manager-policy"), ("reservedSystemCPUs", "--reserved-cpus"),
                          ("cgroupDriver", "--cgroup-driver"),
                          ("containerRuntimeEndpoint", "--container-runtime-endpoint")):
            value = _last(flag_values(argv, flag))
            if value is not None:
                flags[key] = value
    facts["flags"] = flags
    candidates: List[Tuple[str, str]] = []
    if paths.kubelet_config:
        candidates = [(paths.kubelet_config, "option")]
    elif argv and _last(flag_values(argv, "--config")):
        candidates = [(_last(flag_values(argv, "--config")) or "", "kubelet's command line")]
    else:
        candidates = [(p, "default") for p in DEFAULT_KUBELET_CONFIGS]
    for path, source in candidates:
        try:
            doc = _yaml_load(_read_text(path))
        except FileNotFoundError:
            if source != "default":
                facts.update(config_path=path, config_source=source, config_error="not found")
                break
            continue
        except Exception as exc:  # OSError, yaml.YAMLError, UnicodeDecodeError
            facts.update(config_path=path, config_source=source,
                         config_error=f"cannot read: {_error_text(exc).splitlines()[0]}")
            break
        if not isinstance(doc, dict) or doc.get("kind") != "KubeletConfiguration":
            if source != "default":
                facts.update(config_path=path, config_source=source, config_error="not a KubeletConfiguration")
                break
            continue  # e.g. kubeadm's /etc/kubernetes/kubelet.conf is a kubeconfig
        facts.update(config_path=path, config_source=source,
                     config={k: doc.get(k) for k in ("cpuManagerPolicy", "reservedSystemCPUs", "cgroupDriver",
                                                     "kubeReserved", "systemReserved", "containerRuntimeEndpoint")})
        break
    if paths.kubelet_state:
        facts.update(state_path=paths.kubelet_state, state_source="option")
    else:
        root = (_last(flag_values(argv, "--root-dir")) if argv else None) or DEFAULT_KUBELET_ROOT
        facts.update(state_path=os.path.join(root, "cpu_manager_state"),
                     state_source="kubelet's --root-dir" if root != DEFAULT_KUBELET_ROOT else "default")
    try:
        facts["state"] = json.loads(_read_text(facts["state_path"]))
    except FileNotFoundError:
        facts["state_error"] = "not found"
    except (OSError, ValueError) as exc:
        facts["state_error"] = f"cannot read: {_error_text(exc)}"
    return facts


def read_crio_facts(paths: Paths) -> Dict[str, Any]:
    """CRI-O's hooks_dir and cgroup_manager: crio.conf, then its drop-ins in order, then its flags."""
    argv = process_args("crio") if paths.detect else None
    main = paths.crio_config or (_last(flag_values(argv, "--config", "-c")) if argv else None) or DEFAULT_CRIO_CONFIG
    conf_dir = (paths.crio_config_dir or (_last(flag_values(argv, "--config-dir", "-d")) if argv else None)
                or DEFAULT_CRIO_CONFIG_DIR)
    facts: Dict[str, Any] = {"running": argv is not None, "files": [], "errors": [],
                             "hooks_dir": list(DEFAULT_HOOKS_DIRS), "hooks_dir_source": "CRI-O's default",
                             "cgroup_manager": DEFAULT_CRIO_CGROUP_MANAGER, "cgroup_manager_source": "CRI-O's default",
                             "shared_cpuset": "", "shared_cpuset_source": "CRI-O's default",
                             "nri": None, "nri_source": "CRI-O's default", "nri_listen": None,
                             "nri_plugin_dir": None}
    for path in [main] + sorted(glob.glob(os.path.join(glob.escape(conf_dir), "*.conf"))):
        try:
            doc = parse_toml(_read_text(path))
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError, TomlError) as exc:
            facts["errors"].append(f"{path}: {_error_text(exc)}")
            continue
        facts["files"].append(path)
        runtime = toml_get(doc, "crio.runtime") or {}
        hooks = runtime.get("hooks_dir")
        if isinstance(hooks, list) and all(isinstance(h, str) for h in hooks):
            facts.update(hooks_dir=hooks, hooks_dir_source=path)
        manager = runtime.get("cgroup_manager")
        if isinstance(manager, str):
            facts.update(cgroup_manager=manager, cgroup_manager_source=path)
        shared = runtime.get("shared_cpuset")
        if isinstance(shared, str):
            facts.update(shared_cpuset=shared, shared_cpuset_source=path)
        nri = toml_get(doc, "crio.nri.enable_nri")
        if isinstance(nri, bool):
            facts.update(nri=nri, nri_source=path)
        listen = toml_get(doc, "crio.nri.nri_listen")
        if isinstance(listen, str) and listen:
            facts["nri_listen"] = listen
        plugin_dir = toml_get(doc, "crio.nri.nri_plugin_dir")
        if isinstance(plugin_dir, str) and plugin_dir:
            facts["nri_plugin_dir"] = plugin_dir
    if argv:
        shared = _last(flag_values(argv, "--shared-cpuset"))
        if shared is not None:
            facts.update(shared_cpuset=shared, shared_cpuset_source="crio's command line")
        nri = _last(flag_values(argv, "--enable-nri"))
        if nri is not None:
            facts.update(nri=nri.lower() in ("true", "1", ""), nri_source="crio's command line")
        elif "--enable-nri" in argv:
            facts.update(nri=True, nri_source="crio's command line")
        flagged = flag_values(argv, "--hooks-dir")
        if flagged:
            facts.update(hooks_dir=flagged, hooks_dir_source="crio's command line")
        manager = _last(flag_values(argv, "--cgroup-manager"))
        if manager:
            facts.update(cgroup_manager=manager, cgroup_manager_source="crio's command line")
    if paths.hooks_dirs:
        facts.update(hooks_dir=list(paths.hooks_dirs), hooks_dir_source="option")
    return facts


def read_hook_files(dirs: Iterable[str]) -> List[Dict[str, Any]]:
    """Every hooks.d JSON in ``dirs`` that runs this hook (by file name or by hook.path)."""
    found = []
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(glob.escape(d), "*.json"))):
            entry: Dict[str, Any] = {"file": path, "error": None}
            try:
                doc = json.loads(_read_text(path, 1 << 20))
            except (OSError, ValueError) as exc:
                if os.path.basename(path).startswith(HOOK_NAME):
                    entry["error"] = f"cannot read: {_error_text(exc)}"
                    found.append(entry)
                continue
            hook = doc.get("hook") if isinstance(doc, dict) else None
            hook = hook if isinstance(hook, dict) else {}
            exe = hook.get("path")
            ours = os.path.basename(path).startswith(HOOK_NAME) or (
                isinstance(exe, str) and os.path.basename(exe) == HOOK_NAME)
            if not ours:
                continue
            if not isinstance(exe, str):
                entry["error"] = "no hook.path"
                found.append(entry)
                continue
            entry.update(path=exe, path_ok=os.path.isfile(exe) and os.access(exe, os.X_OK),
                         args=hook.get("args") or [], stages=doc.get("stages") or [], when=doc.get("when") or {})
            found.append(entry)
    return found


def read_unit_facts(paths: Paths, units: Sequence[str]) -> Dict[str, Any]:
    """``systemctl show`` of each unit (one call per unit), unless systemd is not running here."""
    facts: Dict[str, Any] = {"skipped": None, "units": {}}
    if paths.skip_units:
        facts["skipped"] = "skipped on request (--no-systemd)"
        return facts
    systemctl = paths.systemctl
    if systemctl is None:
        if not os.path.isdir(paths.systemd_run_dir):
            facts["skipped"] = f"systemd is not PID 1 here ({paths.systemd_run_dir} is missing)"
            return facts
        systemctl = "systemctl"
    for unit in units:
        try:
            proc = subprocess.run([systemctl, "show", "--property=" + ",".join(UNIT_PROPERTIES), "--", unit],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                  timeout=20, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            facts["skipped"] = f"cannot run {systemctl}: {_error_text(exc)}"
            facts["units"] = {}
            return facts
        if proc.returncode != 0:
            facts["units"][unit] = {"error": (proc.stderr.strip() or f"exit status {proc.returncode}")[:300]}
            continue
        props = {}
        for line in proc.stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep and key in UNIT_PROPERTIES:
                props[key] = value
        facts["units"][unit] = props
    return facts


def read_units_list(preset: Optional[str]) -> Tuple[List[str], Optional[str]]:
    """The units to check: the given preset's, else those of the installed mode's preset (hook or
    NRI mode's; one node, one mode), else the built-in list of hook mode (and why)."""
    if preset:
        try:
            return parse_preset(_read_text(preset)), None
        except OSError as exc:
            return list(DEFAULT_UNITS), f"{preset}: {_error_text(exc)}; checked the built-in list"
    units: List[str] = []
    for path in PRESET_PATHS:
        try:
            units += [u for u in parse_preset(_read_text(path)) if u not in units]
        except OSError:
            continue
    if units:
        return units, None
    return list(DEFAULT_UNITS), (f"no preset of either mode is installed ({', '.join(PRESET_PATHS)}); checked "
                                 "hook mode's units")


def read_cgroup_facts(config: Config) -> Dict[str, Any]:
    from ..node.cgroupfs import read_layout

    try:
        layout = read_layout(config.cgroup_root)
        return {"version": layout.version, "root": layout.root, "error": None}
    except HookError as exc:
        return {"version": None, "root": config.cgroup_root, "error": str(exc)}


def _toml_at(doc: Any, *keys: str) -> Any:
    """``doc[k1][k2]...`` with keys that may hold dots (containerd's plugin names); None when absent."""
    for key in keys:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


# containerd's runc options: config version 2 (containerd 1.x) and version 3 (containerd 2.x).
CONTAINERD_RUNC_OPTIONS = (("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "runc", "options"),
                           ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "options"))
# containerd's CRI section with enable_cdi and cdi_spec_dirs: 1.7 (config version 2), 2.x (version 3).
CONTAINERD_CDI_SECTIONS = (("plugins", "io.containerd.grpc.v1.cri"), ("plugins", "io.containerd.cri.v1.runtime"))


def read_mode_facts(paths: Paths) -> Dict[str, Any]:
    """What says NRI mode and how containerd is set up: its NRI setting and socket, its cgroup
    driver (runc's SystemdCgroup), whether it runs; the plugin's unit."""
    argv = process_args("containerd") if paths.detect else None
    config = (paths.containerd_config or (_last(flag_values(argv, "--config", "-c")) if argv else None)
              or DEFAULT_CONTAINERD_CONFIG)
    facts: Dict[str, Any] = {"containerd_running": argv is not None, "containerd_config": config,
                             "containerd_nri": None, "containerd_error": None, "containerd_nri_socket": None,
                             "containerd_systemd_cgroup": None, "nri_unit": NRI_UNIT,
                             "containerd_nri_plugin_path": None, "containerd_enable_cdi": None,
                             "containerd_cdi_spec_dirs": None}
    try:
        doc = parse_toml(_read_text(config))
        nri = _toml_at(doc, "plugins", "io.containerd.nri.v1.nri")
        if isinstance(nri, dict) and isinstance(nri.get("disable"), bool):
            facts["containerd_nri"] = not nri["disable"]
        if isinstance(nri, dict) and isinstance(nri.get("socket_path"), str) and nri["socket_path"]:
            facts["containerd_nri_socket"] = nri["socket_path"]
        if isinstance(nri, dict) and isinstance(nri.get("plugin_path"), str) and nri["plugin_path"]:
            facts["containerd_nri_plugin_path"] = nri["plugin_path"]
        for keys in CONTAINERD_RUNC_OPTIONS:
            systemd = _toml_at(doc, *keys, "SystemdCgroup")
            if isinstance(systemd, bool):
                facts["containerd_systemd_cgroup"] = systemd
        for section in CONTAINERD_CDI_SECTIONS:
            enable, dirs = _toml_at(doc, *section, "enable_cdi"), _toml_at(doc, *section, "cdi_spec_dirs")
            if isinstance(enable, bool):
                facts["containerd_enable_cdi"] = enable
            if isinstance(dirs, list) and all(isinstance(d, str) for d in dirs):
                facts["containerd_cdi_spec_dirs"] = dirs
    except FileNotFoundError:
        facts["containerd_config"] = None
    except (OSError, UnicodeDecodeError, TomlError) as exc:
        facts["containerd_error"] = f"{config}: {_error_text(exc)}"
    units = read_unit_facts(paths, [NRI_UNIT])
    facts["nri_unit_skipped"] = units["skipped"]
    facts["nri_unit_state"] = units["units"].get(NRI_UNIT, {})
    return facts


def compute_nri_socket(paths: Paths, facts: Dict[str, Any]) -> str:
    """The NRI socket to look for: the option, else the socket the runtime in use is configured with."""
    runtime = compute_runtime(facts)[0]
    configured = (facts["mode"].get("containerd_nri_socket") if runtime == "containerd"
                  else facts["crio"].get("nri_listen"))
    return paths.nri_socket or configured or DEFAULT_NRI_SOCKET


def match_cpu_plugin(name: str) -> Optional[str]:
    """What a program or NRI plugin called ``name`` is, when it is one that sets containers' cpusets (a
    pre-installed plugin's file is ``<index>-<name>``); None otherwise."""
    base = os.path.basename(name)
    index, sep, rest = base.partition("-")
    if sep and index.isdigit() and rest:
        base = rest
    for known, what in CPU_PLUGINS:
        if base == known or (known.endswith("-") and base.startswith(known)):
            return what
    return None


def list_processes() -> List[Tuple[int, str, List[str]]]:
    """(pid, name, command line) of every process psutil can see (a container's too, from the host)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency
        return []
    out = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        info = getattr(proc, "info", {}) or {}
        out.append((info.get("pid") or 0, info.get("name") or "", list(info.get("cmdline") or [])))
    return out


def read_nri_plugin_facts(paths: Paths, facts: Dict[str, Any]) -> Dict[str, Any]:
    """Other NRI plugins that set cpusets: pre-installed in the runtime's plugin dir, or running."""
    runtime = compute_runtime(facts)[0]
    configured = (facts["mode"].get("containerd_nri_plugin_path") if runtime == "containerd"
                  else facts["crio"].get("nri_plugin_dir"))
    plugin_dir = paths.nri_plugin_dir or configured or DEFAULT_NRI_PLUGIN_DIR
    found: List[Dict[str, str]] = []
    try:
        names = sorted(os.listdir(plugin_dir))
    except OSError:
        names = []
    for name in names:
        what = match_cpu_plugin(name)
        if what:
            found.append({"what": what, "where": os.path.join(plugin_dir, name)})
    for pid, name, argv in (list_processes() if paths.detect else []):
        what = match_cpu_plugin(argv[0]) if argv else None
        what = what or match_cpu_plugin(name)
        if what:
            found.append({"what": what, "where": f"process {pid} ({' '.join(argv)[:120] or name})"})
    return {"plugin_dir": plugin_dir, "processes": paths.detect, "found": found}


def read_facts(paths: Optional[Paths] = None, environ: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Everything the doctor judges, as JSON-able data. Never raises for a broken node."""
    paths = paths if paths is not None else Paths()
    config_facts, config = read_config_facts(paths, environ)
    crio = read_crio_facts(paths)
    units, preset_note = read_units_list(paths.preset)
    unit_facts = read_unit_facts(paths, units)
    unit_facts.update(preset=paths.preset or ", ".join(PRESET_PATHS), preset_note=preset_note, checked=units)
    facts: Dict[str, Any] = {
        "config": config_facts,
        "cpus": read_cpu_facts(config, config_facts["error"] is None),
        "kubelet": read_kubelet_facts(paths),
        "crio": crio,
        "hooks": read_hook_files(crio["hooks_dir"]),
        "units": unit_facts,
        "cgroup": read_cgroup_facts(config),
        "mode": read_mode_facts(paths),
        "namespaces": {"allowed": list(config.allowed_namespaces), "source": config.source},
        "thread_affinity": (read_affinity_facts(config, save=config_facts["error"] is None) if paths.probe
                            else {"skipped": "not probed (--no-probe)"}),
        "exclusive_source": read_exclusive_source_facts(config, config_facts["error"] is None),
        "cdi": read_cdi_facts(config, config_facts["error"] is None),
    }
    socket = compute_nri_socket(paths, facts)
    facts["mode"].update(nri_socket=socket, nri_socket_exists=os.path.exists(socket))
    facts["nri_plugins"] = read_nri_plugin_facts(paths, facts)
    facts["hook_bundle"] = read_hook_bundle_facts()
    return facts


def read_hook_bundle_facts(package_dir: Optional[str] = None) -> Dict[str, Any]:
    """Whether this install's hook path loads from its bundle (``mixed_cpus_hook/__init__.py``)."""
    from .. import __file__ as package_init
    from .hookbundle import HOOK_PATH_MODULES, format_bundle_name, read_bundle_status

    pkg = package_dir or os.path.dirname(package_init)
    state, stale = read_bundle_status(pkg)
    return {"package_dir": pkg, "bundle": os.path.join(pkg, "__pycache__", format_bundle_name()), "state": state,
            "stale": stale, "modules": len(HOOK_PATH_MODULES)}


# ---------------------------------------------------------------------------------------------
# Judging: facts -> findings (pure)
# ---------------------------------------------------------------------------------------------

def _cpus(text: Optional[str]) -> Optional[frozenset]:
    if text is None:
        return None
    try:
        return parse_cpulist(str(text))
    except HookError:
        return None


def _config_findings(facts: Dict[str, Any]) -> List[Finding]:
    cfg = facts["config"]
    if cfg["error"]:
        return [Finding("config", ERROR, cfg["error"],
                        "correct that setting (the schema is /usr/share/mixed-cpus-hook/config.schema.json; "
                        "the shipped file documents every key); the hook refuses every asking container meanwhile")]
    return [Finding("config", OK, f"{cfg['source']}: valid")]


def _cpu_findings(facts: Dict[str, Any]) -> Tuple[List[Finding], Optional[frozenset]]:
    cpus = facts["cpus"]
    out: List[Finding] = []
    if facts["config"]["error"]:
        return [Finding("shared-cpus", ERROR, "not checked: the configuration is invalid", "fix the configuration")], None
    if cpus["shared_error"]:
        return [Finding("shared-cpus", ERROR, cpus["shared_error"],
                        "write the node's shared cpulist (e.g. \"2-3\") to the shared-CPU file, or set shared_cpus; "
                        "on OpenShift apply the MachineConfig from `mixed-cpus-hook machineconfig`")], None
    if cpus["pool"]:
        return _pool_cpu_findings(facts), None
    shared = _cpus(cpus["shared"]) or frozenset()
    online = _cpus(cpus["online"])
    if online is None:
        out.append(Finding("shared-cpus", ERROR, f"shared CPUs {cpus['shared']}; {cpus['online_error']}",
                           "check that sysfs is mounted (sys_root in the configuration)"))
    elif not shared <= online:
        off = format_cpulist(shared - online)
        out.append(Finding("shared-cpus", ERROR,
                           f"shared CPUs {cpus['shared']} (from {cpus['shared_where']}): {off} not online "
                           f"(online: {cpus['online'] or 'none'})",
                           f"bring CPU(s) {off} online (echo 1 > /sys/devices/system/cpu/cpuN/online) "
                           "or choose shared CPUs among the online ones"))
    else:
        out.append(Finding("shared-cpus", OK, f"{cpus['shared']} (from {cpus['shared_where']}), online"))
    isolated = _cpus(cpus["isolated"])
    if isolated is None:
        out.append(Finding("isolation", WARNING, f"cannot read the isolated CPUs: {cpus['isolated_error']}",
                           "check that sysfs is mounted (sys_root in the configuration)"))
    elif shared & isolated:
        both = format_cpulist(shared & isolated)
        out.append(Finding("isolation", ERROR,
                           f"shared CPU(s) {both} are isolated from the scheduler (isolcpus: {cpus['isolated']}): "
                           "the kernel does not balance a container's threads onto them",
                           f"take {both} out of isolcpus= on the kernel command line (on OpenShift: move them from "
                           "the PerformanceProfile's cpu.isolated to cpu.reserved) and reboot, or pick other shared CPUs"))
    else:
        out.append(Finding("isolation", OK, "no shared CPU is isolated" +
                           (f" (isolcpus: {cpus['isolated']})" if cpus["isolated"] else "")))
    return out, shared


def _pool_cpu_findings(facts: Dict[str, Any]) -> List[Finding]:
    """shared_cpus: pool: the reserved CPUs online (and not isolated: the system runs there); the pool itself
    follows the allocations and is read at every event (`status` shows it)."""
    cpus, cfg = facts["cpus"], facts["config"]
    reserved, online = _cpus(cpus["reserved"]) or frozenset(), _cpus(cpus["online"])
    source = ("the CPU DRA driver's claims" if cfg.get("exclusive_source") == "dra"
              else "kubelet's checkpoint (defaultCpuSet)")
    what = (f"the pool (shared_cpus: pool): the online CPUs outside reserved_cpus "
            f"{format_cpulist(reserved) or '(none)'}, less the exclusive allocations ({source})")
    if online is None:
        return [Finding("shared-cpus", ERROR, f"{what}; {cpus['online_error']}",
                        "check that sysfs is mounted (sys_root in the configuration)")]
    if not reserved <= online:
        off = format_cpulist(reserved - online)
        return [Finding("shared-cpus", ERROR, f"{what}: reserved CPU(s) {off} not online (online: {cpus['online']})",
                        "correct reserved_cpus: the system's CPUs, kubelet's reservedSystemCPUs")]
    if not online - reserved:
        return [Finding("shared-cpus", ERROR, f"{what}: no online CPU is outside reserved_cpus: the pool is always "
                        "empty", "correct reserved_cpus")]
    return [Finding("shared-cpus", OK, what)]


def _kubelet_findings(facts: Dict[str, Any], shared: Optional[frozenset]) -> List[Finding]:
    k = facts["kubelet"]
    out: List[Finding] = []
    settings = dict(k["config"] or {})
    settings.update({key: value for key, value in k["flags"].items()})
    if k["config_error"]:
        out.append(Finding("kubelet-config", ERROR, f"{k['config_path']} (from {k['config_source']}): "
                           f"{k['config_error']}", "name kubelet's configuration file with --kubelet-config"))
    elif k["config"] is None and not k["flags"]:
        out.append(Finding("kubelet-config", WARNING,
                           f"no KubeletConfiguration found (looked at {', '.join(DEFAULT_KUBELET_CONFIGS)}; "
                           f"kubelet {'running' if k['running'] else 'not seen running'}): CPU manager not checked",
                           "name kubelet's configuration file with --kubelet-config"))
    else:
        where = f"{k['config_path']} (from {k['config_source']})" if k["config_path"] else "kubelet's flags"
        extra = " + command-line flags " + ", ".join(sorted(k["flags"])) if k["flags"] and k["config_path"] else ""
        out.append(Finding("kubelet-config", OK, f"{where}{extra}"))
        policy = settings.get("cpuManagerPolicy") or "none"
        if facts["cpus"].get("pool"):
            out.extend(_pool_kubelet_findings(facts, policy, settings.get("reservedSystemCPUs"), k["state_path"]))
        elif policy != "static":
            out.append(Finding("cpu-manager-policy", ERROR,
                               f"cpuManagerPolicy is {policy!r}: no container gets exclusive CPUs, so the hook "
                               "never applies",
                               "set cpuManagerPolicy: static and reservedSystemCPUs in the KubeletConfig (on "
                               "OpenShift a PerformanceProfile or KubeletConfig does it), then "
                               + DRAIN_AND_RESET.format(state=k["state_path"])))
        else:
            out.append(Finding("cpu-manager-policy", OK, "static"))
        if not facts["cpus"].get("pool"):
            out.extend(_reserved_findings(settings.get("reservedSystemCPUs"), shared, k["state_path"]))
    out.extend(_state_findings(k, shared, settings.get("cpuManagerPolicy")))
    return out


def _pool_kubelet_findings(facts: Dict[str, Any], policy: str, reserved_text: Optional[str],
                           state: str) -> List[Finding]:
    """kubelet's CPU manager beside the pool: ``none`` with the CPU DRA driver (exclusive_source dra), ``static``
    with reservedSystemCPUs equal to reserved_cpus otherwise."""
    dra = facts["config"].get("exclusive_source") == "dra"
    want = "none" if dra else "static"
    out: List[Finding] = []
    if policy != want:
        why = ("with exclusive_source dra the CPU DRA driver's claims are the exclusive CPUs, and kubelet's static "
               "manager would pin containers too" if dra else
               "with exclusive_source kubelet the pool is kubelet's defaultCpuSet: no static manager, no pool")
        out.append(Finding("cpu-manager-policy", ERROR, f"cpuManagerPolicy is {policy!r}: {why}",
                           f"set cpuManagerPolicy: {want} in the KubeletConfig, then " + DRAIN_AND_RESET.format(
                               state=state)))
    else:
        out.append(Finding("cpu-manager-policy", OK, f"{policy} (exclusive_source {'dra' if dra else 'kubelet'})"))
    if dra:
        return out
    mine = _cpus(facts["cpus"].get("reserved")) or frozenset()
    theirs = _cpus(reserved_text) if reserved_text not in (None, "") else None
    if theirs != mine:
        out.append(Finding("reserved-cpus", ERROR,
                           f"kubelet's reservedSystemCPUs {reserved_text or '(unset)'} differ from reserved_cpus "
                           f"{format_cpulist(mine) or '(unset)'}: the pool would hold CPUs kubelet keeps for the "
                           "system, or lack some", "set both to the same list"))
    else:
        out.append(Finding("reserved-cpus", OK, f"reservedSystemCPUs {format_cpulist(mine)} = reserved_cpus"))
    return out


def _reserved_findings(reserved_text: Optional[str], shared: Optional[frozenset], state: str) -> List[Finding]:
    """reservedSystemCPUs against a fixed shared set: it must hold every shared CPU."""
    reserved = _cpus(reserved_text) if reserved_text not in (None, "") else None
    if shared is None:
        return [Finding("reserved-cpus", WARNING, "not compared: the shared CPUs are unknown", "fix the shared CPUs first")]
    if reserved_text in (None, ""):
        return [Finding("reserved-cpus", ERROR,
                        f"reservedSystemCPUs is not set: kubelet may hand shared CPU(s) {format_cpulist(shared)} "
                        "to a container exclusively",
                        f"set reservedSystemCPUs to a set that includes {format_cpulist(shared)} (see "
                        "docs/openshift.md, KubeletConfig), then " + DRAIN_AND_RESET.format(state=state))]
    if reserved is None:
        return [Finding("reserved-cpus", ERROR, f"reservedSystemCPUs {reserved_text!r} is not a cpulist",
                        "correct reservedSystemCPUs in the KubeletConfig")]
    if not shared <= reserved:
        missing = format_cpulist(shared - reserved)
        return [Finding("reserved-cpus", ERROR,
                        f"reservedSystemCPUs {format_cpulist(reserved)} lacks shared CPU(s) {missing}: kubelet "
                        "can hand them to a container exclusively",
                        f"add {missing} to reservedSystemCPUs, then " + DRAIN_AND_RESET.format(state=state))]
    return [Finding("reserved-cpus", OK, f"reservedSystemCPUs {format_cpulist(reserved)} includes the shared CPUs")]


def _state_findings(k: Dict[str, Any], shared: Optional[frozenset], policy: Optional[str]) -> List[Finding]:
    where = f"{k['state_path']} (from {k['state_source']})"
    if k["state_error"]:
        status = ERROR if k["state_source"] == "option" else WARNING
        return [Finding("cpu-manager-state", status, f"{where}: {k['state_error']}",
                        "name the CPU manager's state file with --kubelet-state" if status == ERROR else
                        "nothing to do when kubelet does not run here; else name it with --kubelet-state")]
    doc = k["state"]
    if not isinstance(doc, dict):
        return [Finding("cpu-manager-state", ERROR, f"{where}: not a JSON object", DRAIN_AND_RESET.format(
            state=k["state_path"]))]
    out: List[Finding] = []
    state_policy = doc.get("policyName")
    if policy and state_policy and state_policy != policy:
        out.append(Finding("cpu-manager-state", ERROR,
                           f"{where}: policyName {state_policy!r} but kubelet is configured with {policy!r}: "
                           "kubelet refuses to start", DRAIN_AND_RESET.format(state=k["state_path"])))
    overlaps = []
    entries = doc.get("entries") or {}
    if shared and isinstance(entries, dict):
        for pod_uid, containers in sorted(entries.items()):
            if not isinstance(containers, dict):
                continue
            for name, cpus_text in sorted(containers.items()):
                cpus = _cpus(cpus_text)
                if cpus and cpus & shared:
                    overlaps.append(f"pod {pod_uid} container {name}: {format_cpulist(cpus & shared)}")
    if overlaps:
        out.append(Finding("cpu-manager-state", ERROR,
                           f"{where}: shared CPUs assigned exclusively: " + "; ".join(overlaps),
                           "make reservedSystemCPUs include the shared CPUs, then "
                           + DRAIN_AND_RESET.format(state=k["state_path"])))
    elif not out:
        count = sum(len(v) for v in entries.values() if isinstance(v, dict)) if isinstance(entries, dict) else 0
        out.append(Finding("cpu-manager-state", OK,
                           f"{where}: no exclusive assignment overlaps the shared CPUs ({count} assignment(s))"
                           if shared is not None else f"{where}: {count} assignment(s); shared CPUs unknown"))
    return out


def read_exclusive_source_facts(config: Config, config_ok: bool) -> Optional[Dict[str, Any]]:
    """kubelet's checkpoint as the engine reads it (``kubelet_state_file``): used, absent, or refused and why."""
    from ..node.kubelet import load_checkpoint

    if not config_ok:
        return None
    path = config.kubelet_state_file
    facts: Dict[str, Any] = {"path": path, "exists": os.path.lexists(path), "error": None, "policy": None,
                             "verified": False, "entries": 0}
    try:
        ckpt = load_checkpoint(path)
    except HookError as exc:
        facts["error"] = exc.message
        return facts
    if ckpt is not None:
        facts.update(policy=ckpt.policy, verified=ckpt.checksum_verified,
                     entries=sum(len(v) for v in ckpt.entries.values()) + len(ckpt.by_container_id))
    return facts


def read_cdi_facts(config: Config, config_ok: bool) -> Optional[Dict[str, Any]]:
    """With exclusive_source dra, each of ``cdi_spec_dirs`` as the plugin reads it (node.cdi), every spec
    parsed, those without a claim too (a broken spec also fails the runtime's CDI injection)."""
    from ..node.cdi import read_cdi_specs

    if not config_ok or config.exclusive_source != "dra":
        return None
    dirs: List[Dict[str, Any]] = []
    for d in config.cdi_spec_dirs:
        scan = read_cdi_specs([d], every_spec=True)
        driver = [spec for _path, spec in scan.specs if spec.kind == CPU_DRIVER_KIND]
        dirs.append({"path": d, "missing": bool(scan.missing), "files": scan.files,
                     "driver_specs": len(driver), "driver_devices": sum(s.devices for s in driver),
                     "claims": sum(len(s.claims) for s in driver),
                     "errors": [p for p in scan.problems if p.startswith("CDI spec directory ")],
                     "broken": [p for p in scan.problems if not p.startswith("CDI spec directory ")]})
    return {"dirs": dirs}


def _exclusive_source_findings(facts: Dict[str, Any]) -> List[Finding]:
    """Which source of truth the engine uses for a container's exclusive CPUs, and why."""
    src = facts.get("exclusive_source")
    if not src:
        return []
    cfg = facts.get("config") or {}
    if cfg.get("pool") and cfg.get("exclusive_source") == "dra":
        return [Finding("exclusive-source", OK, "the CPU DRA driver's claims: the DRA_CPUSET_<claim uid> variables "
                        "its CDI specs put in each container's environment (kubelet's checkpoint is not used)")]
    path, fallback = src["path"], "config.json's cpus at start, then the records and cgroups"
    out: List[Finding] = []
    if cfg.get("pool") and not src["exists"]:
        out.append(Finding("exclusive-source", ERROR, f"no kubelet checkpoint at {path} (kubelet_state_file): with "
                           "shared_cpus: pool and exclusive_source kubelet the pool is its defaultCpuSet, so every "
                           "container is refused", "point kubelet_state_file at kubelet's cpu_manager_state"))
    elif src["error"]:
        out.append(Finding("exclusive-source", WARNING,
                           f"kubelet's checkpoint {path} is refused ({src['error']}): using {fallback}",
                           "kubelet writes it atomically, so kubelet did not write this: if kubelet runs here, "
                           + DRAIN_AND_RESET.format(state=path) + "; else point kubelet_state_file at its file"))
    elif not src["exists"]:
        out.append(Finding("exclusive-source", OK,
                           f"no kubelet checkpoint at {path} (kubelet_state_file): using {fallback}; a cpuset holding "
                           "shared CPUs is never taken as exclusive"))
    elif src["policy"] != "static":
        out.append(Finding("exclusive-source", WARNING,
                           f"kubelet's checkpoint {path} is of policy {src['policy']!r}, not 'static': not used; "
                           f"using {fallback}", "set kubelet's cpuManagerPolicy to static"))
    else:
        checksum = "checksum verified" if src["verified"] else "checksum 0: not verified"
        out.append(Finding("exclusive-source", OK,
                           f"kubelet's checkpoint {path} (policy static, {checksum}, {src['entries']} entr"
                           f"{'y' if src['entries'] == 1 else 'ies'}): the truth for exclusive CPUs"))
    state = (facts.get("kubelet") or {}).get("state_path")
    if state and os.path.realpath(state) != os.path.realpath(path) and os.path.exists(state):
        out.append(Finding("exclusive-source", WARNING,
                           f"kubelet's CPU manager state is {state} ({facts['kubelet']['state_source']}), but the hook "
                           f"reads {path}", f"set kubelet_state_file: {state} in the configuration"))
    return out


CDI_DIRS_FIX = ("set cdi_spec_dirs to the runtime's CDI spec directories (containerd: cdi_spec_dirs in its CRI "
                "section; CRI-O: cdi_spec_dirs in crio.conf; both default to /etc/cdi and /var/run/cdi) and, in a pod, "
                "mount them read-only (deploy/base/daemonset.yaml)")


def _format_cdi_dir(d: Dict[str, Any]) -> str:
    if d["missing"]:
        return f"{d['path']}: does not exist"
    return (f"{d['path']}: {d['files']} spec file(s), {d['driver_specs']} of the CPU DRA driver ({CPU_DRIVER_KIND}: "
            f"{d['driver_devices']} device(s), {d['claims']} claim(s))")


def _cdi_findings(facts: Dict[str, Any]) -> List[Finding]:
    """exclusive_source dra: a DRA_CPUSET_ variable counts only when a CDI spec of cdi_spec_dirs holds it
    (core.cdi): each directory missing or unreadable, what the CPU DRA driver's specs there hold, the
    specs skipped as broken, and containerd's own spec directories when they differ."""
    cdi = facts.get("cdi")
    if not cdi or facts["config"].get("error"):
        return []
    dirs = cdi["dirs"]
    out = [Finding("cdi-specs", ERROR, f"{e}: a claim only there is refused", CDI_DIRS_FIX)
           for d in dirs for e in d["errors"]]
    if all(d["missing"] for d in dirs):
        out.append(Finding("cdi-specs", WARNING, f"no CDI spec directory exists ({', '.join(d['path'] for d in dirs)}): "
                           "until the CPU DRA driver writes a spec into one, every container with a DRA_CPUSET_ "
                           "variable is refused", CDI_DIRS_FIX))
    elif not out:
        out.append(Finding("cdi-specs", OK, "a claim counts only when a spec holds it; " +
                           "; ".join(_format_cdi_dir(d) for d in dirs)))
    broken = [p for d in dirs for p in d["broken"]]
    if broken:
        out.append(Finding("cdi-specs", WARNING, f"{len(broken)} CDI spec file(s) skipped: {'; '.join(broken[:3])}"
                           + ("; ..." if len(broken) > 3 else ""),
                           "a claim only a skipped spec holds is refused, and the runtime's CDI injection fails on "
                           "it too: correct or remove the file (the CPU DRA driver writes its own again at prepare)"))
    mode = facts.get("mode") or {}
    if compute_runtime(facts)[0] != "containerd":
        return out
    theirs = mode.get("containerd_cdi_spec_dirs")
    if theirs is not None and \
            {os.path.normpath(p) for p in theirs} - {os.path.normpath(d["path"]) for d in dirs}:
        out.append(Finding("cdi-specs", WARNING, f"containerd reads CDI specs from {', '.join(theirs)} "
                           f"({mode.get('containerd_config')}), the plugin from {', '.join(d['path'] for d in dirs)}: a "
                           "claim containerd injects from a directory the plugin does not read is refused",
                           f"set cdi_spec_dirs: {json.dumps(theirs)} in the configuration"))
    if mode.get("containerd_enable_cdi") is False:
        out.append(Finding("cdi-specs", ERROR, f"containerd's CDI is off (enable_cdi = false in "
                           f"{mode.get('containerd_config')}): the CPU DRA driver's claims never reach a container",
                           "set enable_cdi = true in containerd's CRI section and restart containerd"))
    return out


def _hooks_findings(facts: Dict[str, Any]) -> List[Finding]:
    crio = facts["crio"]
    if compute_runtime(facts)[0] == "containerd":
        files = [h["file"] for h in facts["hooks"]]
        if not files:
            return []
        return [Finding("hooks-d", WARNING, f"containerd runs no hooks.d files: {', '.join(files)} do nothing here "
                        "(one node, one mode: NRI mode on containerd)", UNINSTALL_HOOK_MODE)]
    prefix = facts["config"]["annotation_prefix"]
    out: List[Finding] = []
    dirs = ", ".join(crio["hooks_dir"]) or "(none)"
    if crio["errors"]:
        out.append(Finding("crio-config", WARNING, "cannot read: " + "; ".join(crio["errors"]),
                           "correct the file (CRI-O itself will not start with it either)"))
    read_files = ", ".join(crio["files"]) or "no CRI-O configuration file found"
    out.append(Finding("crio-config", OK, f"hooks_dir {dirs} (from {crio['hooks_dir_source']}); read: {read_files}"))
    for kind, stage, doc_name in (("apply", "createRuntime", "mixed-cpus-hook.json"),
                                  ("release", "poststop", "mixed-cpus-hook-release.json")):
        check = f"hook-{kind}"
        matching = [h for h in facts["hooks"] if not h["error"] and stage in h["stages"] and kind in h["args"]]
        broken = [h for h in facts["hooks"] if h["error"]]
        if not matching and compute_mode(facts) == "nri":
            out.append(Finding(check, OK, f"no hooks.d file in {dirs}: not needed in NRI mode"))
            continue
        if not matching:
            msg = f"no hooks.d file in CRI-O's hooks_dir ({dirs}) runs `{HOOK_NAME} {kind}` at {stage}"
            if broken:
                msg += "; unreadable: " + "; ".join(f"{h['file']}: {h['error']}" for h in broken)
            out.append(Finding(check, ERROR, msg,
                               f"install {doc_name} (from the RPM, or `make install`) into "
                               f"{crio['hooks_dir'][0] if crio['hooks_dir'] else '/usr/share/containers/oci/hooks.d'}"
                               " (CRI-O reloads hooks.d by itself)"))
            continue
        h = matching[0]
        if not h["path_ok"]:
            out.append(Finding(check, ERROR, f"{h['file']}: hook.path {h['path']} is not an executable file: CRI-O "
                               "skips the hook (and may refuse to start)",
                               f"install the executable at {h['path']} (before the JSON), or correct hook.path"))
            continue
        problem = when_problem(h["when"], prefix)
        if problem:
            out.append(Finding(check, ERROR, f"{h['file']}: {problem}",
                               f"make a \"when\" annotations key match \"{prefix}/<container>\" (e.g. "
                               f"\"^{re.escape(prefix)}/.+$\": \".*\")"))
            continue
        out.append(Finding(check, OK, f"{h['file']}: {h['path']} {kind} at {stage}"))
    return out


def when_problem(when: Any, prefix: str) -> Optional[str]:
    """Why a hooks.d ``when`` would not run the hook for an asking container (None: it would).

    containers/common runs a hook when ``always`` is true or every condition set matches; an
    ``annotations`` entry matches when one annotation's key and value match its two regexps
    (Go RE2, unanchored; Python's re agrees on the patterns such files use).
    """
    if not isinstance(when, dict) or not any(when.get(k) for k in ("always", "annotations", "commands",
                                                                   "hasBindMounts")):
        return "\"when\" sets no condition: containers/common rejects the file"
    if when.get("always") is True:
        return None
    if when.get("commands") or when.get("hasBindMounts"):
        return None  # cannot be judged from here; the annotation condition below still must match
    sample_key, sample_value = f"{prefix}/app", "enable"
    annotations = when.get("annotations") or {}
    if not isinstance(annotations, dict):
        return "\"when.annotations\" is not an object"
    for key_re, value_re in annotations.items():
        try:
            if not (re.search(key_re, sample_key) and re.search(str(value_re), sample_value)):
                return (f"\"when.annotations\" {key_re!r}: {value_re!r} does not match the annotation "
                        f"{sample_key}: {sample_value} (annotation_prefix {prefix!r}): the hook never runs")
        except re.error as exc:
            return f"\"when.annotations\" {key_re!r}: not a regular expression here ({exc})"
    return None


ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated")


def _unit_findings(facts: Dict[str, Any]) -> List[Finding]:
    u = facts["units"]
    out: List[Finding] = []
    if u.get("preset_note"):
        out.append(Finding("units", WARNING, u["preset_note"],
                           "install the RPM (or `make install`), which ships the preset"))
    if u["skipped"]:
        out.append(Finding("units", WARNING, f"units not checked: {u['skipped']}",
                           "run the check on the node itself (oc debug node/<node> -- chroot /host "
                           "mixed-cpus-hook check), or point --systemctl at a working systemctl"))
        return out
    for unit in u.get("checked", sorted(u["units"])):
        props = u["units"].get(unit, {"error": "not queried"})
        check = f"unit:{unit}"
        if "error" in props:
            out.append(Finding(check, ERROR, f"systemctl: {props['error']}", "check the unit with systemctl status"))
            continue
        load, enabled = props.get("LoadState", ""), props.get("UnitFileState", "")
        active, sub = props.get("ActiveState", ""), props.get("SubState", "")
        if load in ("not-found", "") or load != "loaded":
            out.append(Finding(check, ERROR, f"not loaded ({load or 'unknown'})",
                               "install the RPM (or `make install`), then systemctl daemon-reload"))
            continue
        if enabled not in ENABLED_STATES:
            out.append(Finding(check, ERROR, f"{enabled or 'unknown'}, {active}",
                               f"systemctl enable --now {unit} (on OpenShift the MachineConfig enables it)"))
            continue
        finished_oneshot = (unit.endswith(".service") and props.get("Type") == "oneshot" and active == "inactive"
                            and props.get("Result") == "success")
        if active in ("active", "activating", "reloading") or finished_oneshot:
            out.append(Finding(check, OK, f"{enabled}, {active} ({sub})"))
        elif active == "failed":
            out.append(Finding(check, ERROR, f"{enabled}, failed ({props.get('Result', '')})",
                               f"journalctl -u {unit} for the cause, then systemctl reset-failed {unit} && "
                               f"systemctl start {unit}"))
        else:
            out.append(Finding(check, ERROR, f"{enabled}, {active or 'unknown'} ({sub})", f"systemctl start {unit}"))
    return out


def _cgroup_findings(facts: Dict[str, Any]) -> List[Finding]:
    cg = facts["cgroup"]
    if cg["error"]:
        return [Finding("cgroup", ERROR, cg["error"], "check cgroup_root in the configuration and the cgroup mounts")]
    crio = facts["crio"]
    k = facts["kubelet"]
    kubelet_driver = k["flags"].get("cgroupDriver") or (k["config"] or {}).get("cgroupDriver")
    if k["config"] is not None and not kubelet_driver:
        kubelet_driver = DEFAULT_KUBELET_CGROUP_DRIVER
    if compute_runtime(facts)[0] == "containerd":
        mode = facts["mode"]
        systemd = mode.get("containerd_systemd_cgroup")
        runtime_driver = "systemd" if systemd else "cgroupfs"
        where = f"from {mode['containerd_config']}" if systemd is not None else "containerd's default"
        runtime_seen = f"containerd {runtime_driver} (SystemdCgroup = {str(bool(systemd)).lower()}, {where})"
        fix = ("set kubelet's cgroupDriver and containerd's SystemdCgroup (the runc runtime's options) to agree "
               "(systemd: SystemdCgroup = true)")
    else:
        runtime_driver = crio["cgroup_manager"]
        runtime_seen = f"CRI-O {runtime_driver} (from {crio['cgroup_manager_source']})"
        fix = "set kubelet's cgroupDriver and CRI-O's cgroup_manager to the same value (systemd)"
    seen = f"cgroup v{cg['version']} at {cg['root']}; driver: {runtime_seen}"
    if kubelet_driver:
        seen += f", kubelet {kubelet_driver}"
    if kubelet_driver and kubelet_driver != runtime_driver:
        return [Finding("cgroup", ERROR, seen + ": they differ", fix)]
    return [Finding("cgroup", OK, seen)]


def compute_runtime(facts: Dict[str, Any]) -> Tuple[Optional[str], str]:
    """Which container runtime kubelet uses here ("crio", "containerd" or None) and what says so.

    kubelet's containerRuntimeEndpoint first, then the runtime processes that run, then the
    configuration files found (CRI-O's before containerd's: many nodes carry a containerd
    configuration for Docker).
    """
    k = facts.get("kubelet") or {}
    endpoint = (k.get("flags") or {}).get("containerRuntimeEndpoint") or (k.get("config") or {}).get(
        "containerRuntimeEndpoint")
    if isinstance(endpoint, str):
        for runtime in ("crio", "containerd"):
            if runtime in endpoint:
                return runtime, f"kubelet's containerRuntimeEndpoint {endpoint}"
    crio, mode = facts.get("crio") or {}, facts.get("mode") or {}
    if crio.get("running"):
        return "crio", "crio is running"
    if mode.get("containerd_running"):
        return "containerd", "containerd is running"
    if crio.get("files"):
        return "crio", f"{crio['files'][0]} exists"
    if mode.get("containerd_config"):
        return "containerd", f"{mode['containerd_config']} exists"
    return None, ("no container runtime found (no containerRuntimeEndpoint in kubelet's configuration, no crio or "
                  "containerd process, no crio.conf or containerd config.toml)")


RUNTIME_LABELS = {"crio": "CRI-O", "containerd": "containerd"}
UNINSTALL_HOOK_MODE = ("remove the hook-mode files: `dnf remove mixed-cpus-hook-hook-mode` (the RPM), or "
                       "`make uninstall MODE=hook` (make install)")


def _runtime_findings(facts: Dict[str, Any]) -> List[Finding]:
    runtime, why = compute_runtime(facts)
    if runtime is None:
        return [Finding("runtime", WARNING, why, "run the check on the node, or name the runtime's configuration "
                        "with --crio-config or --containerd-config")]
    return [Finding("runtime", OK, f"{RUNTIME_LABELS[runtime]} ({why})")]


def _hook_mode_files(facts: Dict[str, Any]) -> List[str]:
    return [h["file"] for h in facts.get("hooks", []) if not h["error"] and h.get("path_ok")
            and "createRuntime" in h["stages"] and "apply" in h["args"]]


def compute_mode(facts: Dict[str, Any]) -> str:
    """Which front end acts on this node: "hook", "nri", "both" or "none".

    Hook mode: a hooks.d file in CRI-O's hooks_dir runs ``apply`` at createRuntime. NRI mode:
    the plugin's unit (mixed-cpus-hook-nri.service) is active.
    """
    hook = bool(_hook_mode_files(facts)) and compute_runtime(facts)[0] != "containerd"
    mode = facts.get("mode") or {}
    nri = (mode.get("nri_unit_state") or {}).get("ActiveState") in ("active", "activating", "reloading")
    return {(True, True): "both", (True, False): "hook", (False, True): "nri"}.get((hook, nri), "none")


def _runtime_nri(facts: Dict[str, Any]) -> Tuple[Optional[bool], str]:
    """Whether the runtime serves NRI plugins (None: cannot tell) and what says so."""
    crio, mode = facts["crio"], facts.get("mode") or {}
    if mode.get("nri_socket_exists"):
        return True, f"the runtime's NRI socket {mode['nri_socket']} exists"
    if crio.get("nri") is not None:
        return crio["nri"], f"CRI-O enable_nri = {str(crio['nri']).lower()} (from {crio['nri_source']})"
    if mode.get("containerd_nri") is not None:
        return mode["containerd_nri"], (f"containerd's io.containerd.nri.v1.nri disable = "
                                        f"{str(not mode['containerd_nri']).lower()} (from {mode['containerd_config']})")
    return None, f"no NRI socket at {mode.get('nri_socket', DEFAULT_NRI_SOCKET)} and no NRI setting found"


ENABLE_NRI_FIX = ("enable NRI in the runtime and restart it: CRI-O `[crio.nri] enable_nri = true` (on by default "
                  "since 1.30), containerd 1.7 `[plugins.\"io.containerd.nri.v1.nri\"] disable = false` (on by "
                  "default since 2.0)")


def _mode_findings(facts: Dict[str, Any], shared: Optional[frozenset]) -> List[Finding]:
    """Which mode acts here (hook / NRI / both), and CRI-O's own shared CPUs acting as well."""
    out: List[Finding] = []
    mode = compute_mode(facts)
    files = ", ".join(_hook_mode_files(facts))
    runtime_nri, nri_why = _runtime_nri(facts)
    if mode == "hook":
        out.append(Finding("mode", OK, f"hook mode: {files} runs `{HOOK_NAME} apply` at createRuntime"))
    elif mode == "nri":
        if runtime_nri is False or (runtime_nri is None and facts["mode"].get("containerd_config") is None
                                    and facts["crio"].get("nri") is None):
            out.append(Finding("mode", ERROR, f"NRI mode: {NRI_UNIT} is active, but {nri_why}: no runtime calls it",
                               ENABLE_NRI_FIX))
        else:
            out.append(Finding("mode", OK, f"NRI mode: {NRI_UNIT} is active; {nri_why}"))
    elif mode == "both":
        out.append(Finding("mode", WARNING, f"both modes are set up: {files} (hook mode) and {NRI_UNIT} (NRI mode); "
                           "one node, one mode: both front ends act on the same containers",
                           "keep one. NRI mode: `dnf remove mixed-cpus-hook-hook-mode` (or `make uninstall`, then "
                           "`make install MODE=nri`). Hook mode: `systemctl disable --now "
                           f"{NRI_UNIT}` and `dnf remove mixed-cpus-hook-nri-mode`"))
    elif compute_runtime(facts)[0] == "containerd":
        out.append(Finding("mode", WARNING, f"NRI mode is not set up: {NRI_UNIT} is not active (containerd has no "
                           "hook mode)", f"install the NRI-mode files and `systemctl enable --now {NRI_UNIT}`"))
        return out
    else:
        out.append(Finding("mode", WARNING, f"neither mode is set up: no hooks.d file runs `{HOOK_NAME} apply` and "
                           f"{NRI_UNIT} is not active", "install the hooks.d files (hook mode, CRI-O or podman) or "
                           f"`systemctl enable --now {NRI_UNIT}` (NRI mode, containerd or CRI-O)"))
    if compute_runtime(facts)[0] == "containerd":
        return out
    crio = facts["crio"]
    theirs = _cpus(crio.get("shared_cpuset")) if crio.get("shared_cpuset") else None
    if crio.get("shared_cpuset"):
        differs = (f"; they differ from this product's shared CPUs {format_cpulist(shared)}"
                   if shared is not None and theirs is not None and theirs != shared else "")
        out.append(Finding("crio-shared-cpuset", WARNING,
                           f"CRI-O's own shared CPUs are set: shared_cpuset = {crio['shared_cpuset']!r} (from "
                           f"{crio['shared_cpuset_source']}){differs}: a pod with a cpu-shared.crio.io annotation under "
                           "the high-performance runtime class is widened and its quota raised by CRI-O, and by this "
                           "product too when it also asks with the mixed-cpus annotation: both would act",
                           "use one per node: remove shared_cpuset from CRI-O's configuration (on OpenShift drop "
                           "cpu.shared and workloadHints.mixedCpus from the PerformanceProfile), or do not run this "
                           "product on these nodes (docs/openshift.md, \"This product or OpenShift's own mixed CPUs?\")"))
    else:
        out.append(Finding("crio-shared-cpuset", OK, "CRI-O's shared_cpuset is not set"))
    return out


def _pool_mode_findings(facts: Dict[str, Any]) -> List[Finding]:
    """shared_cpus: pool needs NRI mode: only an NRI plugin answers a container's creation with updates that
    move the others off its CPUs before it starts."""
    if not facts["config"].get("pool") or facts["config"].get("error"):
        return []
    mode = compute_mode(facts)
    if mode in ("hook", "both"):
        return [Finding("pool", ERROR, "shared_cpus: pool is refused in hook mode: a hook cannot shrink the other "
                        "containers' cpusets before a new container starts",
                        f"run NRI mode (`systemctl enable --now {NRI_UNIT}`, the hook-mode files removed), or set "
                        "shared_cpus to a fixed cpulist")]
    if mode == "nri":
        return [Finding("pool", OK, f"shared_cpus: pool (exclusive_source {facts['config'].get('exclusive_source')}) "
                        "in NRI mode")]
    return [Finding("pool", WARNING, "shared_cpus: pool works in NRI mode only, and NRI mode is not set up",
                    f"`systemctl enable --now {NRI_UNIT}`")]


def _nri_plugin_findings(facts: Dict[str, Any]) -> List[Finding]:
    """Another NRI plugin that sets cpusets: NRI lets one plugin set a container's cpuset per request and fails the
    container's creation when a second one does (containerd/nri pkg/adaptation/result.go, claimCpusetCpus)."""
    seen = facts.get("nri_plugins")
    if not seen:
        return []
    acting = compute_mode(facts) in ("nri", "both") or bool(facts["config"].get("pool"))
    where = f"{seen['plugin_dir']}" + (" and the running processes" if seen["processes"] else "")
    if not seen["found"]:
        return [Finding("nri-plugins", OK, f"no other NRI plugin that pins CPUs (looked in {where})")] if acting else []
    names = "; ".join(f"{f['what']}: {f['where']}" for f in seen["found"][:3])
    dra = any(f["what"] == DRA_DRIVER for f in seen["found"])
    fix = ("keep the CPU DRA driver's kubelet plugin (the claims and their CDI specs) and run this plugin in place of "
           "its NRI half (shared_cpus: pool, exclusive_source: dra; docs/pool.md)" if dra else
           "one CPU policy per node: remove that plugin, or this product from the node")
    return [Finding("nri-plugins", ERROR if acting else WARNING,
                    f"another NRI plugin pins CPUs: {names}. NRI refuses a container whose cpuset two plugins set "
                    "(\"plugins ... both tried to set CPU pinning\"): with both, containers fail to be created", fix)]


def _hook_bundle_findings(facts: Dict[str, Any]) -> List[Finding]:
    """In hook mode: does a container start load the hook from its bundle (about 2 ms less per start)?"""
    b = facts.get("hook_bundle")
    if not b or compute_mode(facts) not in ("hook", "both"):
        return []
    if b["state"] == "current":
        return [Finding("hook-bundle", OK, f"the hook's {b['modules']} modules load from {b['bundle']}")]
    if b["state"] == "absent":  # an install from pip or a source tree: correct, ~2 ms slower per container start
        return [Finding("hook-bundle", OK, f"no bundle at {b['bundle']}: the hook's modules load one file at a "
                        "time (make install and the RPM write one: python3 -m mixed_cpus_hook.ops.hookbundle)")]
    fix = (f"python3 -m mixed_cpus_hook.ops.hookbundle {b['package_dir']} (as root; make install and the RPM "
           "write it), or reinstall the package")
    what = {"unreadable": f"{b['bundle']} is unreadable or damaged",
            "other-python": f"{b['bundle']} was written by another Python version",
            "stale": f"{len(b['stale'])} module(s) changed since {b['bundle']} was written "
                     f"({', '.join(n.rpartition('.')[2] for n in b['stale'][:3])}{', ...' if len(b['stale']) > 3 else ''})"
            }.get(b["state"], f"{b['bundle']}: {b['state']}")
    return [Finding("hook-bundle", WARNING, f"{what}: those modules load one file at a time, about 2 ms more per "
                    "container start (nothing else differs)", fix)]


def compute_findings(facts: Dict[str, Any]) -> List[Finding]:
    """Judge the facts: a list of findings in a fixed order (config, CPUs, kubelet, CRI-O, units, cgroup)."""
    out = _config_findings(facts)
    cpu, shared = _cpu_findings(facts)
    out += cpu
    out += _kubelet_findings(facts, shared)
    out += _exclusive_source_findings(facts)
    out += _cdi_findings(facts)
    out += _runtime_findings(facts)
    out += _hooks_findings(facts)
    out += _hook_bundle_findings(facts)
    out += _mode_findings(facts, shared)
    out += _pool_mode_findings(facts)
    out += _nri_plugin_findings(facts)
    out += _unit_findings(facts)
    out += _cgroup_findings(facts)
    out += _namespace_findings(facts)
    out += _affinity_findings(facts)
    return out


def _namespace_findings(facts: Dict[str, Any]) -> List[Finding]:
    """allowed_namespaces is opt-in: "*" lets any tenant take CPU time the scheduler never counted."""
    ns = facts.get("namespaces")
    if not ns or facts["config"].get("error"):
        return []
    allowed, where = ns.get("allowed") or [], ns.get("source") or "the configuration"
    edit = f"list the namespaces that may ask in 'allowed_namespaces' ({where})"
    if "*" in allowed:
        return [Finding("allowed-namespaces", WARNING, "\"*\": every namespace may ask for the shared CPUs, which "
                        "the scheduler does not count", edit + " instead of \"*\"")]
    if not allowed:
        return [Finding("allowed-namespaces", WARNING, "none listed: no pod may ask for mixed CPUs", edit)]
    return [Finding("allowed-namespaces", OK, f"{', '.join(allowed)} (from {where})")]


def read_affinity_facts(config: Config, save: bool = True) -> Optional[Dict[str, Any]]:
    """The thread-affinity probe on the real cgroup file system (None on a fake node: nothing mounted there).

    Its verdict is also left in ``<state_dir>/thread-affinity`` for the engine (status' "pins may be lost"),
    unless ``save`` is false: with a configuration that does not load, the state dir is not known.
    """
    from .affinity import CANNOT_TELL, probe

    root = os.path.realpath(config.cgroup_root)
    if not _is_cgroup_mount(root):
        return None
    result = probe(root)
    facts = dict(result._asdict())
    if result.verdict != CANNOT_TELL and save and _save_verdict(config.state_dir, result.verdict):
        facts["saved"] = os.path.join(config.state_dir, "thread-affinity")
    return facts


def _is_cgroup_mount(root: str) -> bool:
    """``root`` or a directory right below it is a cgroup or cgroup2 mount (/proc/self/mountinfo)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) > 4 and right.split()[:1] in (["cgroup"], ["cgroup2"]) and (
                        fields[4] == root or os.path.dirname(fields[4]) == root):
                    return True
    except OSError:
        pass
    return False


def _save_verdict(state_dir: str, verdict: str) -> bool:
    """Best effort, atomic, never through a symlink: the engine falls back to the kernel version."""
    try:
        os.makedirs(state_dir, mode=0o755, exist_ok=True)
        tmp = os.path.join(state_dir, f".thread-affinity.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, f"{verdict}\n".encode("ascii"))
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(state_dir, "thread-affinity"))
    except OSError:
        return False
    return True


POOL_PINS = ("with shared_cpus: pool every claim or release anywhere on the node changes every mixed container's "
             "cpuset, and on kernels before 6.2 each change resets every thread's affinity to the whole new set: the "
             "threads an application pinned in a mixed container lose their pins at every claim")
POOL_PINS_FIX = "a kernel 6.2 or later, or a fixed shared set (shared_cpus: a cpulist) in NRI mode"


def _kernel_before_6_2(release: str) -> Optional[bool]:
    try:
        major, minor = (int(x) for x in release.split("-")[0].split(".")[:2])
    except ValueError:
        return None
    return (major, minor) < (6, 2)


def _affinity_findings(facts: Dict[str, Any]) -> List[Finding]:
    """Whether a cpuset shrink and regrow (kubelet's rewrite, then the hook's reapply) keeps thread pins; with the
    pool, whether a claim anywhere resets the pins in mixed containers."""
    from .affinity import KEPT, WIDENED

    probe = facts.get("thread_affinity")
    pool = bool(facts["config"].get("pool"))
    if not probe:
        return []
    if probe.get("skipped"):
        kernel = facts["cpus"].get("kernel") or ""
        if pool and _kernel_before_6_2(kernel):
            return [Finding("thread-affinity", WARNING, f"kernel {kernel} (from its version; {probe['skipped']}): "
                            + POOL_PINS, POOL_PINS_FIX)]
        return [Finding("thread-affinity", OK, f"{probe['skipped']}: whether thread pins survive kubelet's rewrite "
                        "in hook mode is not known")]
    seen = f"kernel {probe['kernel']}, cgroup v{probe['cgroup_version']}: {probe['detail']}"
    wrote = [f"made and removed the scratch cgroup {probe['scratch']}"] if probe.get("scratch") else []
    wrote += [f"wrote the verdict to {probe['saved']}"] if probe.get("saved") else []
    if wrote:
        seen += f"; {' and '.join(wrote)}"
    if probe["verdict"] == KEPT:
        return [Finding("thread-affinity", OK, f"pins survive a cpuset shrink and regrow ({seen})")]
    if probe["verdict"] == WIDENED and pool:
        return [Finding("thread-affinity", WARNING, f"pins are lost when a cpuset changes ({seen}): " + POOL_PINS,
                        POOL_PINS_FIX)]
    if probe["verdict"] == WIDENED:
        return [Finding("thread-affinity", WARNING, f"pins are lost when a cpuset shrinks and regrows ({seen}): in "
                        "hook mode every kubelet rewrite followed by the reapply spreads an application's pinned "
                        "threads over the whole mixed set (kernels before 6.2)",
                        f"use NRI mode (`systemctl enable --now {NRI_UNIT}`), which never shrinks the set, or a "
                        "kernel 6.2 or later")]
    return [Finding("thread-affinity", WARNING, f"cannot tell whether pins survive a cpuset shrink ({seen})",
                    "run `mixed-cpus-hook check` as root on the node")]


def worst(findings: Iterable[Finding]) -> str:
    return max((f.status for f in findings), key=STATUS_ORDER.__getitem__, default=OK)


def format_table(findings: Sequence[Finding]) -> str:
    """CHECK / STATUS / FINDING columns; each fix on its own line below its finding; a summary."""
    width = max([len("CHECK")] + [len(f.check) for f in findings])
    lines = [f"{'CHECK'.ljust(width)}  STATUS   FINDING"]
    for f in findings:
        lines.append(f"{f.check.ljust(width)}  {f.status.upper() if f.status != OK else 'ok':7}  {f.message}")
        if f.fix:
            lines.append(f"{' ' * width}  {'':7}  fix: {f.fix}")
    errors = sum(f.status == ERROR for f in findings)
    warnings = sum(f.status == WARNING for f in findings)
    lines.append(f"{errors} error(s), {warnings} warning(s)")
    return "\n".join(lines)


def to_json(findings: Sequence[Finding]) -> List[Dict[str, str]]:
    return [dict(f._asdict()) for f in findings]
