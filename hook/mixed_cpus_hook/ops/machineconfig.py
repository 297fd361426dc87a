"""An OpenShift MachineConfig (Ignition 3.2) that configures the hook on every node of a role.

The RPM (layered into the RHCOS image) brings the code, the hooks.d files and the systemd
units; the MachineConfig brings what differs per cluster and per role: the configuration
file, the node's shared CPUs, and the units enabled. Everything here is pure: the CLI reads
the files and prints the result.

Imported only by ``cli.py`` (never on the hook's createRuntime path).
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..core.cpuset import format_cpulist, parse_cpulist
from ..core.errors import ConfigError, UsageError
from ..node.config import DEFAULT_CONFIG_PATH, Config, parse_config_text

IGNITION_VERSION = "3.2.0"
MC_API_VERSION = "machineconfiguration.openshift.io/v1"
ROLE_LABEL = "machineconfiguration.openshift.io/role"
# A MachineConfigPool selects its MachineConfigs by this label; the role is also a node-role
# label value and part of the object's name, so it must be a DNS label.
ROLE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
MODE_CONFIG = 0o644
MODE_SHARED = 0o644
PRESET_NAME = "90-mixed-cpus-hook.preset"
PRESET_PATH = "/usr/lib/systemd/system-preset/" + PRESET_NAME

# The units rpm/90-mixed-cpus-hook.preset enables: every non-template unit in rpm/units/ with
# an [Install] section. tests/unit/test_machineconfig.py keeps the three in step.
DEFAULT_UNITS: Tuple[str, ...] = (
    "mixed-cpus-hook-config.path",
    "mixed-cpus-hook-reconcile.timer",
    "mixed-cpus-hook-sync.path",
    "mixed-cpus-hook.service",
)


def is_template(unit: str) -> bool:
    """``foo@.service`` is a template; ``foo@bar.service`` is an instance, ``foo.service`` neither."""
    stem = unit.rsplit(".", 1)[0]
    return stem.endswith("@")


def parse_preset(text: str) -> List[str]:
    """The units a systemd preset file enables, in file order, without templates or globs.

    ``enable NAME [INSTANCES]`` lines count; ``disable`` lines, comments and blank lines do not.
    """
    units: List[str] = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split(";", 1)[0].split()
        if len(words) >= 2 and words[0] == "enable":
            name = words[1]
            if not is_template(name) and not any(c in name for c in "*?[") and name not in units:
                units.append(name)
    return units


def has_install_section(unit_text: str) -> bool:
    """True when a unit file has an [Install] section (only then can it be enabled)."""
    return any(line.strip() == "[Install]" for line in unit_text.splitlines())


# NRI mode's units (rpm/90-mixed-cpus-hook-nri.preset, the nri-mode package); every other unit of
# rpm/units/ is hook mode's (rpm/90-mixed-cpus-hook.preset, the hook-mode package). One node, one mode.
NRI_UNITS = frozenset(("mixed-cpus-hook-nri.service",))
PRESET_HEADERS = {
    "hook": ("# systemd.preset(5) of mixed-cpus-hook's hook mode (the hook-mode package, `make install MODE=hook`):\n"
             "# the units that put the mixed set back when kubelet rewrites it."),
    "nri": ("# systemd.preset(5) of mixed-cpus-hook's NRI mode (the nri-mode package, `make install MODE=nri`):\n"
            "# the NRI plugin."),
}


def compute_preset(units: Dict[str, str], mode: str = "hook") -> str:
    """The text of one mode's preset for ``{unit name: unit file text}``.

    Enables every non-template unit with an [Install] section; template instances are started
    by the hook itself, never enabled at boot.
    """
    names = sorted(n for n, text in units.items() if not is_template(n) and has_install_section(text))
    lines = [
        PRESET_HEADERS[mode],
        "# The units to enable at installation (%systemd_post) and on `systemctl preset`. Generated",
        "# by `make preset` from rpm/units/: every non-template unit of the mode with an [Install] section.",
    ]
    return "\n".join(lines + [f"enable {n}" for n in names]) + "\n"


def preset_for_files(paths: Iterable[str], mode: str = "hook") -> str:
    """compute_preset over unit files on disk (``make preset``)."""
    import os

    units = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            units[os.path.basename(path)] = f.read()
    return compute_preset(units, mode)


def encode_data_url(data: bytes) -> str:
    """An RFC 2397 data URL, base64 (what the MCO itself writes)."""
    return "data:text/plain;charset=utf-8;base64," + base64.b64encode(data).decode("ascii")


def decode_data_url(url: str) -> bytes:
    """The bytes of a data URL, base64 or percent-encoded (both are valid in Ignition)."""
    if not url.startswith("data:") or "," not in url:
        raise ValueError(f"not a data URL: {url[:40]!r}")
    head, payload = url[5:].split(",", 1)
    if head.split(";")[-1] == "base64":
        return base64.b64decode(payload, validate=True)
    return urllib.parse.unquote_to_bytes(payload)


def default_config_text(role: str) -> str:
    """The configuration written when none is given: comments only, so every default applies."""
    return (
        f"# mixed-cpus-hook configuration for the nodes of role {role!r}, written by the MachineConfig\n"
        "# `mixed-cpus-hook machineconfig`. Every setting has its default (see the commented file in\n"
        "# /usr/share/doc/mixed-cpus-hook/config.yaml); the shared CPUs are in the shared-CPU file.\n"
    )


def format_allowed_namespaces(globs: Sequence[str]) -> str:
    """The ``allowed_namespaces`` setting as YAML lines (each glob JSON-quoted: valid YAML)."""
    import json

    return ("# Namespaces whose pods may ask (--allow-namespace); every other namespace is refused.\n"
            "allowed_namespaces:\n" + "".join(f"  - {json.dumps(g)}\n" for g in globs))


def compute_config_text(config_text: str, allowed_namespaces: Sequence[str], config: Config,
                        config_where: str) -> str:
    """``config_text`` with the ``--allow-namespace`` globs added (or checked against its own list)."""
    globs = list(dict.fromkeys(allowed_namespaces))
    for glob in globs:
        if not glob or "\n" in glob:
            raise UsageError(f"{glob!r} is not a namespace glob", "--allow-namespace")
    if not globs:
        return config_text
    import yaml

    if "allowed_namespaces" in (yaml.safe_load(config_text) or {}):
        if list(config.allowed_namespaces) != globs:
            raise ConfigError(
                f"setting 'allowed_namespaces' is {', '.join(config.allowed_namespaces)}, but --allow-namespace is "
                f"{', '.join(globs)}: drop one or make them equal", config_where)
        return config_text
    sep = "" if not config_text or config_text.endswith("\n") else "\n"
    return config_text + sep + format_allowed_namespaces(globs)


def _file(path: str, data: bytes, mode: int) -> Dict[str, Any]:
    return {"path": path, "mode": mode, "overwrite": True, "contents": {"source": encode_data_url(data)}}


def compute_machineconfig(role: str, shared_cpus: str, config_text: Optional[str] = None,
                          config_where: str = "--config", units: Iterable[str] = DEFAULT_UNITS,
                          name: Optional[str] = None, config_path: str = DEFAULT_CONFIG_PATH,
                          allowed_namespaces: Sequence[str] = ()) -> Dict[str, Any]:
    """The MachineConfig as a dict, ready for YAML or JSON.

    ``shared_cpus`` is a cpulist; ``config_text`` the YAML to lay down (None: a comments-only
    file). The configuration is validated; when it names ``shared_cpus_file`` the shared CPUs go
    there, and when it sets ``shared_cpus`` itself that value must equal ``shared_cpus``.
    ``allowed_namespaces`` (``--allow-namespace``) is added to the configuration; one that lists
    its own namespaces must list the same. Raises UsageError or ConfigError.
    """
    if not ROLE_RE.match(role) or len(role) > 63:
        raise UsageError(f"role {role!r} is not a DNS label (lower-case letters, digits, '-')", "--role")
    cpus = parse_cpulist(shared_cpus, "--shared-cpus")
    if not cpus:
        raise UsageError("the shared cpulist is empty", "--shared-cpus")
    shared_text = format_cpulist(cpus)
    if config_text is None:
        config_text = default_config_text(role)
    config: Config = parse_config_text(config_text, config_where)
    with_namespaces = compute_config_text(config_text, allowed_namespaces, config, config_where)
    if with_namespaces != config_text:
        config_text = with_namespaces
        config = parse_config_text(config_text, config_where)
    if config.shared_cpus is not None:
        set_in_config = parse_cpulist(config.shared_cpus, f"{config_where}: setting 'shared_cpus'")
        if set_in_config != cpus:
            raise ConfigError(
                f"setting 'shared_cpus' is {format_cpulist(set_in_config)}, but --shared-cpus is {shared_text}: "
                "drop the setting (the shared-CPU file then holds them) or make them equal", config_where)
    unit_list = list(dict.fromkeys(units))
    for unit in unit_list:
        if is_template(unit):
            raise UsageError(f"{unit}: a template unit cannot be enabled without an instance", "units")
    shared_file_text = (
        "# The node's shared CPUs: kubelet's reservedSystemCPUs must include them.\n"
        f"{shared_text}\n"
    )
    files = [
        _file(config_path, config_text.encode("utf-8"), MODE_CONFIG),
        _file(config.shared_cpus_file, shared_file_text.encode("ascii"), MODE_SHARED),
    ]
    return {
        "apiVersion": MC_API_VERSION,
        "kind": "MachineConfig",
        "metadata": {
            "name": name or f"99-{role}-mixed-cpus-hook",
            "labels": {ROLE_LABEL: role},
        },
        "spec": {
            "config": {
                "ignition": {"version": IGNITION_VERSION},
                "storage": {"files": files},
                "systemd": {"units": [{"name": unit, "enabled": True} for unit in unit_list]},
            },
        },
    }


NRI_UNIT = "mixed-cpus-hook-nri.service"
# CRI-O reads drop-ins from /etc/crio/crio.conf.d in name order; the keys are CRI-O's
# (internal/config/nri: enable_nri, nri_listen). On by default from CRI-O 1.30; set anyway,
# so that an older CRI-O or a cluster-wide override does not leave the plugin unheard.
CRIO_NRI_DROPIN = "/etc/crio/crio.conf.d/90-mixed-cpus-hook-nri.conf"
CRIO_NRI_TEXT = (
    "# mixed-cpus-hook NRI mode (written by its MachineConfig): CRI-O calls NRI plugins.\n"
    "[crio.nri]\n"
    "enable_nri = true\n"
    'nri_listen = "/var/run/nri/nri.sock"\n'
)


def compute_nri_mode(mc: Dict[str, Any]) -> Dict[str, Any]:
    """The MachineConfig ``mc`` turned to NRI mode: CRI-O's NRI enabled and the plugin's unit in
    place of the hook-mode units.

    One node, one mode: the image layers the nri-mode package, which has neither the hooks.d
    files nor the hook-mode units (the plugin reconciles every record itself, pod quotas
    included). Returns a new dict.
    """
    import copy

    out = copy.deepcopy(mc)
    config = out["spec"]["config"]
    config["storage"]["files"].append(_file(CRIO_NRI_DROPIN, CRIO_NRI_TEXT.encode("ascii"), MODE_CONFIG))
    config["systemd"]["units"] = [{"name": NRI_UNIT, "enabled": True}]
    return out


def embedded_files(mc: Dict[str, Any]) -> Dict[str, bytes]:
    """path -> contents of every file in a MachineConfig (for tests and for a look before applying)."""
    return {f["path"]: decode_data_url(f["contents"]["source"]) for f in mc["spec"]["config"]["storage"]["files"]}


def mc_allowed_namespaces(mc: Dict[str, Any], config_path: str = DEFAULT_CONFIG_PATH) -> Tuple[str, ...]:
    """The allowed_namespaces of the configuration a MachineConfig lays down."""
    text = embedded_files(mc)[config_path].decode("utf-8")
    return parse_config_text(text, config_path).allowed_namespaces


def render(mc: Dict[str, Any], fmt: str = "yaml") -> str:
    """YAML (the usual ``oc apply -f`` input) or JSON text."""
    if fmt == "json":
        import json

        return json.dumps(mc, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(mc, sort_keys=False, default_flow_style=False, width=1 << 16)


def units_from_preset(text: Optional[str], fallback: Sequence[str] = DEFAULT_UNITS) -> List[str]:
    """The preset's units, or ``fallback`` when there is no preset text."""
    return parse_preset(text) if text is not None else list(fallback)


# -- without a custom RHCOS image ---------------------------------------------------------------
#
# RHCOS has the platform Python 3.9 but neither click nor PyYAML (docs/openshift.md). The hook
# (apply, release) and the reapply services need the standard library only, so a MachineConfig
# can bring the code itself: the package's stdlib-only modules under /usr/local (on RHCOS a
# symlink to the writable /var/usrlocal), two small executables, the hooks.d files in /etc
# (CRI-O's hooks_dir there includes /etc/containers/oci/hooks.d), the units in /etc/systemd/system
# with their commands pointed at those executables, and the configuration as JSON.

NOIMAGE_LIB = "/usr/local/lib/mixed-cpus-hook"
NOIMAGE_BIN = "/usr/local/bin/mixed-cpus-hook"
NOIMAGE_WATCHES_BIN = "/usr/local/bin/mixed-cpus-hook-watches"
NOIMAGE_HOOKS_DIR = "/etc/containers/oci/hooks.d"
NOIMAGE_UNIT_DIR = "/etc/systemd/system"
NOIMAGE_TMPFILES = "/etc/tmpfiles.d/mixed-cpus-hook.conf"
MODE_EXECUTABLE = 0o755
# The modules apply, release, the watches entry and the metrics import (standard library only;
# tests/unit/test_machineconfig_noimage.py runs them laid out with nothing else importable).
NOIMAGE_MODULES: Tuple[str, ...] = (
    "__init__", "core/__init__", "core/bounds", "core/cgroup", "core/compat", "core/cpuset", "core/desired", "core/errors",
    "core/model", "core/plan", "core/quota", "core/request", "core/validate", "frontends/__init__",
    "frontends/entry", "frontends/hook/__init__", "frontends/hook/fastpath", "frontends/systemd/__init__",
    "frontends/systemd/watches", "node/__init__", "node/cgroupfs", "node/config", "node/facts", "node/files",
    "node/kubelet", "node/log", "node/oci", "store/__init__", "store/records", "usecases/__init__",
    "usecases/apply", "usecases/common", "usecases/converge", "usecases/metrics", "usecases/reconcile",
    "usecases/release",
)
# Units that need more than the standard library (the NRI plugin: click, protobuf).
NOIMAGE_SKIPPED_UNITS: Tuple[str, ...] = ("mixed-cpus-hook-nri.service",)
# What the RPM's units run -> what the no-image units run instead. The click command line's
# `reconcile --sync-watches` becomes the watches module's stdlib-only `reconcile-all`.
NOIMAGE_COMMANDS: Tuple[Tuple[str, str], ...] = (
    ("/usr/bin/python3 -I -m mixed_cpus_hook.frontends.systemd.watches ", NOIMAGE_WATCHES_BIN + " "),
    ("/usr/bin/mixed-cpus-hook reconcile ", NOIMAGE_WATCHES_BIN + " reconcile-all "),
)
EXEC_KEYS = ("ExecStart", "ExecStartPre", "ExecStartPost", "ExecStop", "ExecStopPost", "ExecReload",
             "ExecCondition")


def compute_noimage_executable(module: str, function: str, call: str, purpose: str) -> str:
    """A tiny #!/usr/bin/python3 -I script: ``call`` (of ``function`` from ``module``) from NOIMAGE_LIB.

    The library is found next to the script (``../lib/mixed-cpus-hook``, symlinks resolved), so
    the same file works laid out under any root. A command that needs click or PyYAML (status,
    check, machineconfig) ends with one line saying so instead of a traceback.
    """
    return (
        "#!/usr/bin/python3 -I\n"
        f"# {purpose}\n"
        "# Laid down by `mixed-cpus-hook machineconfig --no-image`: the package's standard-library-only\n"
        "# modules are in ../lib/mixed-cpus-hook; status, check and machineconfig need the RPM.\n"
        "import os\n"
        "import sys\n"
        "sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))),\n"
        "                                \"lib\", \"mixed-cpus-hook\"))\n"
        "try:\n"
        f"    from {module} import {function}\n"
        "except ImportError as exc:  # a broken layout\n"
        "    sys.exit(f\"mixed-cpus-hook: error: {exc} (the no-image install lays down only the hook's modules)\")\n"
        "try:\n"
        f"    {call}\n"
        "except ImportError as exc:\n"
        "    sys.stderr.write(f\"mixed-cpus-hook: error: {exc}: this command needs the RPM (click, PyYAML); \"\n"
        "                     \"without a custom image only apply, release and the units' commands run\\n\")\n"
        "    sys.exit(1)\n"
    )


def compute_noimage_unit(name: str, text: str) -> str:
    """A unit of rpm/units/ with its commands pointed at the no-image executables.

    Raises UsageError when a command would still need the RPM's /usr/bin/mixed-cpus-hook (click)
    or a package on sys.path that is not there.
    """
    for old, new in NOIMAGE_COMMANDS:
        text = text.replace(old, new)
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() in EXEC_KEYS and ("mixed_cpus_hook" in value or "/usr/bin/mixed-cpus-hook" in value):
            raise UsageError(f"{name}: {line.strip()!r} needs the RPM (no stdlib-only equivalent)", "--no-image")
    return text


def compute_noimage_hook(name: str, text: str) -> str:
    """A hooks.d file with hook.path = the no-image executable (as `make install` sets BINDIR's)."""
    import json

    doc = json.loads(text)
    if doc.get("hook", {}).get("path") != "/usr/bin/mixed-cpus-hook":
        raise UsageError(f"{name}: hook.path is {doc.get('hook', {}).get('path')!r}, not /usr/bin/mixed-cpus-hook",
                         "--no-image")
    doc["hook"]["path"] = NOIMAGE_BIN
    return json.dumps(doc, indent=2) + "\n"


def compute_json_config(config_text: str, where: str) -> str:
    """The configuration as JSON (read without PyYAML), equal setting for setting to ``config_text``."""
    import json

    import yaml

    doc = yaml.safe_load(config_text) or {}
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if parse_config_text(text, where)._replace(source="") != parse_config_text(config_text, where)._replace(source=""):
        raise ConfigError("the configuration does not survive conversion to JSON", where)
    return text


def compute_noimage_machineconfig(role: str, shared_cpus: str, sources: Dict[str, bytes], units: Dict[str, str],
                                  hooks: Dict[str, str], tmpfiles: str, config_text: Optional[str] = None,
                                  config_where: str = "--config", enabled: Iterable[str] = DEFAULT_UNITS,
                                  name: Optional[str] = None, allowed_namespaces: Sequence[str] = ()
                                  ) -> Dict[str, Any]:
    """compute_machineconfig's MachineConfig plus the code, for RHCOS without a custom image.

    ``sources``: module file name (``engine.py``) -> its bytes; ``units``: unit name -> the text
    of rpm/units/; ``hooks``: hooks.d file name -> its text; ``tmpfiles``: rpm/mixed-cpus-hook.tmpfiles.
    The configuration is written as JSON; the units go into Ignition's ``systemd.units``
    (``contents``, so in /etc/systemd/system), ``enabled`` ones enabled.
    """
    mc = compute_machineconfig(role, shared_cpus, config_text=config_text, config_where=config_where,
                               units=enabled, name=name, allowed_namespaces=allowed_namespaces)
    spec = mc["spec"]["config"]
    files = spec["storage"]["files"]
    config_file = files[0]
    config_file["contents"]["source"] = encode_data_url(
        compute_json_config(decode_data_url(config_file["contents"]["source"]).decode("utf-8"), config_where
                            ).encode("utf-8"))
    missing = sorted(m + ".py" for m in NOIMAGE_MODULES if m + ".py" not in sources)
    if missing:
        raise UsageError(f"the package's modules {', '.join(missing)} are missing", "--no-image")
    for module in NOIMAGE_MODULES:
        files.append(_file(f"{NOIMAGE_LIB}/mixed_cpus_hook/{module}.py", sources[module + ".py"], MODE_CONFIG))
    files.append(_file(NOIMAGE_BIN, compute_noimage_executable(
        "mixed_cpus_hook.frontends.entry", "entry", "entry()",
        "mixed-cpus-hook: the OCI hook (hooks.d runs \"apply\" and \"release\").").encode(), MODE_EXECUTABLE))
    files.append(_file(NOIMAGE_WATCHES_BIN, compute_noimage_executable(
        "mixed_cpus_hook.frontends.systemd.watches", "main", "sys.exit(main())",
        "mixed-cpus-hook-watches: what the units run (python -m mixed_cpus_hook.frontends.systemd.watches).").encode(),
        MODE_EXECUTABLE))
    for hook_name in sorted(hooks):
        files.append(_file(f"{NOIMAGE_HOOKS_DIR}/{hook_name}", compute_noimage_hook(hook_name, hooks[hook_name]
                                                                                     ).encode(), MODE_CONFIG))
    files.append(_file(NOIMAGE_TMPFILES, tmpfiles.encode("utf-8"), MODE_CONFIG))
    enabled_set = {u["name"] for u in spec["systemd"]["units"]}
    unknown = sorted(enabled_set - set(units))
    if unknown:
        raise UsageError(f"cannot enable {', '.join(unknown)}: no such unit in the package", "--no-image")
    unit_entries: List[Dict[str, Any]] = []
    for unit_name in sorted(units):
        if unit_name in NOIMAGE_SKIPPED_UNITS:
            continue
        entry: Dict[str, Any] = {"name": unit_name, "contents": compute_noimage_unit(unit_name, units[unit_name])}
        if unit_name in enabled_set:
            entry["enabled"] = True
        unit_entries.append(entry)
    spec["systemd"]["units"] = unit_entries
    return mc


def read_noimage_files(package_dir: Optional[str] = None, repo_dir: Optional[str] = None, root: str = ""
                       ) -> Tuple[Dict[str, bytes], Dict[str, str], Dict[str, str], str]:
    """The sources, units, hooks.d files and tmpfiles entry compute_noimage_machineconfig lays down.

    The modules come from the installed package; the rest from the source tree it was installed
    from (a clone, ``pip install -e``) when there is one, else from where the RPM puts them
    (under ``root``).
    """
    import glob
    import os

    package_dir = package_dir or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    repo_dir = repo_dir or os.path.dirname(os.path.dirname(package_dir))
    if os.path.isdir(os.path.join(repo_dir, "rpm", "units")):
        unit_glob = os.path.join(repo_dir, "rpm", "units", "mixed-cpus-hook*")
        hook_glob = os.path.join(repo_dir, "hooks.d", "mixed-cpus-hook*.json")
        tmpfiles_path = os.path.join(repo_dir, "rpm", "mixed-cpus-hook.tmpfiles")
    else:
        unit_glob = root + "/usr/lib/systemd/system/mixed-cpus-hook*"
        hook_glob = root + "/usr/share/containers/oci/hooks.d/mixed-cpus-hook*.json"
        tmpfiles_path = root + "/usr/lib/tmpfiles.d/mixed-cpus-hook.conf"

    def read(path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise UsageError(f"cannot read: {exc.strerror}", path) from None

    sources = {m + ".py": read(os.path.join(package_dir, m + ".py")) for m in NOIMAGE_MODULES}
    units = {os.path.basename(p): read(p).decode("utf-8") for p in sorted(glob.glob(unit_glob))}
    hooks = {os.path.basename(p): read(p).decode("utf-8") for p in sorted(glob.glob(hook_glob))}
    if not units or not hooks:
        raise UsageError(f"no units or hooks.d files found ({unit_glob}, {hook_glob})", "--no-image")
    return sources, units, hooks, read(tmpfiles_path).decode("utf-8")
