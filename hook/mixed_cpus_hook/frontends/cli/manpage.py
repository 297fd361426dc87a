"""mixed-cpus-hook(8) in roff, generated from the click definitions that ``--help`` prints.

``make man`` runs ``python -m mixed_cpus_hook.frontends.cli.manpage --schema schemas/config.schema.json``
and writes ``docs/mixed-cpus-hook.8``; tests/unit/test_manpage.py fails when the committed page
differs from what this module makes, and checks that man(1) renders it without a warning.
Commands, options and their help come from the CLI; the settings from the configuration's JSON
Schema; files, exit codes and examples are written here. CLI-only (imports click).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import click

from ... import __version__
from .main import cli

NAME = "mixed-cpus-hook"
SECTION = "8"
DATE = "2026-12-02"  # the release date of the version below; bump both together

FILES: Tuple[Tuple[str, str], ...] = (
    ("/etc/mixed-cpus-hook/config.yaml", "The configuration (see CONFIGURATION); a missing file means every default."),
    ("/etc/mixed-cpus-hook/shared-cpus", "The node's shared CPUs as a cpulist, unless the setting shared_cpus is set."),
    ("/usr/share/containers/oci/hooks.d/mixed-cpus-hook.json",
     "Hook mode: the createRuntime hook (apply) for CRI-O and podman; mixed-cpus-hook-release.json next to it is "
     "the poststop hook (release). On RHCOS, /etc/containers/oci/hooks.d is read too. An NRI node has none "
     "(one node, one mode)."),
    ("/run/mixed-cpus-hook/", "The state directory: containers/<id>.json and pods/<pod>.json records, the lock (NRI mode: "
     "the journal of the records an event saves until its answer is sent; done by the next holder when the "
     "plugin died), "
     "the config cache (entries of gone files pruned, at most 16), the pending/ and recheck/ queues, the "
     "watch/<id>/ links, metrics.json, and thread-affinity (the verdict of check's probe)."),
    ("/usr/lib/systemd/system/mixed-cpus-hook*", "Hook mode: the units that reapply the mixed sets when kubelet, "
     "runc or systemd rewrites them; the watch units are started per container by mixed-cpus-hook-sync.service. "
     "NRI mode: mixed-cpus-hook-nri.service, the plugin."),
    ("/usr/lib/systemd/system-preset/90-mixed-cpus-hook.preset", "The units hook mode enables; "
     "90-mixed-cpus-hook-nri.preset, those of NRI mode. check checks the units of the installed one."),
    ("/usr/share/mixed-cpus-hook/install-manifest", "What make install laid down (make uninstall removes it); "
     "not in the RPMs."),
    ("/usr/share/mixed-cpus-hook/*.schema.json", "JSON Schemas of the configuration, the records and the state."),
    ("/var/lib/kubelet/cpu_manager_state", "kubelet's CPU manager checkpoint: the exclusive CPUs of each container."),
)

EXIT_CODES: Tuple[Tuple[str, str], ...] = (
    ("0", "Success, nothing to do, a container that does not ask or is not applicable (a warning is logged), or an "
          "error under failure_policy: ignore. status: every container is in sync."),
    ("1", "An error: invalid state, config.json, configuration or cpulist, an offline CPU, a cgroup not found or "
          "outside cgroup_root, a write the kernel refused, a refused namespace, systemctl failed. check: a finding "
          "is an error. status: a record could not be read or judged, or a node-wide problem. reconcile: a "
          "container could not be fixed or its record is broken (the others are still reconciled)."),
    ("2", "A usage error (bad command line)."),
    ("3", "status only: a container drifted (its cgroup does not hold its mixed set)."),
)

EXAMPLES: Tuple[Tuple[str, str], ...] = (
    ("Is this node ready? Each finding comes with its fix:", "mixed-cpus-hook check"),
    ("Every tracked container, desired against actual:", "mixed-cpus-hook status"),
    ("The same for a program: one JSON object, {\"rows\": [...], \"problems\": [...]}:",
     "mixed-cpus-hook status --json --config /etc/mixed-cpus-hook/config.yaml"),
    ("The doctor on a containerd node, without the thread-affinity probe (it writes nothing then):",
     "mixed-cpus-hook check --no-probe --containerd-config /etc/containerd/config.toml"),
    ("NRI mode in the foreground (the unit mixed-cpus-hook-nri.service runs this):",
     "mixed-cpus-hook nri --socket /var/run/nri/nri.sock"),
    ("What a reapply would write, then write it:", "mixed-cpus-hook reconcile --dry-run\nmixed-cpus-hook reconcile"),
    ("Run the hook by hand, as CRI-O does, on a saved OCI state:",
     "mixed-cpus-hook apply --dry-run --state state.json"),
    ("The MachineConfig for the nodes of an OpenShift pool:",
     "mixed-cpus-hook machineconfig --role worker-cnf --shared-cpus 2-3 | oc apply -f -"),
    ("The journal of every apply, reapply and error:", "journalctl -t mixed-cpus-hook"),
)

SEE_ALSO = ("crio.conf(5)", "oci-hooks(5)", "podman(1)", "systemd.path(5)", "journalctl(1)", "kubelet(1)")


def escape(text: str) -> str:
    """Text for a roff line: backslashes, hyphens (so that options are not hyphenated) and leading dots."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    lines = []
    for line in out.split("\n"):
        lines.append("\\&" + line if line[:1] in (".", "'") else line)
    return "\n".join(lines)


def paragraphs(text: str) -> List[str]:
    """click's help text as paragraphs (blank-line separated, lines joined), except a paragraph that
    click keeps as written (its first line is ``\\b``: an exit-code table), whose lines stay."""
    import inspect

    text = inspect.cleandoc(text or "")
    return [p.strip("\n") if p.startswith("\b\n") else " ".join(p.split()) for p in text.split("\n\n") if p.strip()]


def format_paragraph(para: str) -> List[str]:
    """roff for one paragraph of ``paragraphs``: filled text, or a kept block (no fill)."""
    if para.startswith("\b\n"):
        return [".nf"] + [escape(line) for line in para.split("\n")[1:]] + [".fi", ".PP"]
    return [escape(para), ".PP"]


def _commands(group: click.Group, ctx: click.Context, prefix: Tuple[str, ...] = ()
              ) -> Iterable[Tuple[Tuple[str, ...], click.Command, click.Context]]:
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or getattr(cmd, "hidden", False):
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx)
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, sub, prefix + (name,))
        else:
            yield prefix + (name,), cmd, sub


def _options(cmd: click.Command, ctx: click.Context) -> List[Tuple[str, str]]:
    out = []
    for param in cmd.get_params(ctx):
        record = param.get_help_record(ctx)
        if record and not record[0].endswith("--help"):
            out.append(record)
    return out


def _usage(cmd: click.Command, ctx: click.Context) -> str:
    return " ".join(cmd.collect_usage_pieces(ctx))


def format_options(records: Sequence[Tuple[str, str]]) -> List[str]:
    lines = []
    for opts, help_text in records:
        lines += [".TP", f"\\fB{escape(opts)}\\fR", escape(" ".join(help_text.split()))]
    return lines


def format_settings(schema: Dict[str, Any]) -> List[str]:
    lines = []
    for key, prop in schema.get("properties", {}).items():
        default = prop.get("default")
        head = f"\\fB{escape(key)}\\fR"
        if default is not None:
            head += f" (default: {escape(json.dumps(default))})"
        lines += [".TP", head, escape(" ".join(prop.get("description", "").split()))]
    return lines


def compute_manpage(schema: Dict[str, Any], group: click.Group = cli) -> str:
    """The whole page as roff text (deterministic: no dates or paths from the machine)."""
    ctx = click.Context(group, info_name=NAME)
    about = paragraphs(group.help or "")
    title = escape(NAME.upper())
    lines = [
        f'.TH {title} {SECTION} "{DATE}" "{NAME} {__version__}" "System Administration"',
        ".SH NAME",
        f"{escape(NAME)} \\- {escape((about[0][0].lower() + about[0][1:]).rstrip('.') if about else '')}",
        ".SH SYNOPSIS",
        f"\\fB{escape(NAME)}\\fR [\\fB\\-\\-config\\fR \\fIPATH\\fR] [\\fB\\-v\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR]",
        ".SH DESCRIPTION",
    ]
    for para in about[1:]:
        lines += format_paragraph(para)
    lines += ["Global options:"]
    lines += format_options(_options(group, ctx))
    lines.append(".SH COMMANDS")
    for path, cmd, sub in _commands(group, ctx):
        lines += [".SS " + escape(" ".join(path)),
                  f"\\fB{escape(NAME)} {escape(' '.join(path))}\\fR {escape(_usage(cmd, sub))}", ".PP"]
        for para in paragraphs(cmd.help or cmd.short_help or ""):
            lines += format_paragraph(para)
        lines += format_options(_options(cmd, sub))
    lines += [".SH CONFIGURATION",
              escape("YAML, /etc/mixed-cpus-hook/config.yaml unless --config or $MIXED_CPUS_HOOK_CONFIG name "
                     "another file. Every setting is optional; an unknown one is an error. The contract is the JSON "
                     "Schema /usr/share/mixed-cpus-hook/config.schema.json; mixed-cpus-hook check validates the "
                     "file."), ".PP",
              escape("A pod asks, per container, with the annotation <annotation_prefix>/<container-name>: "
                     "\"enable\"."), ".PP", "Settings:"]
    lines += format_settings(schema)
    lines += [".SH ENVIRONMENT", ".TP", "\\fBMIXED_CPUS_HOOK_CONFIG\\fR",
              "The configuration file, when \\fB\\-\\-config\\fR is not given.", ".TP",
              "\\fBMIXED_CPUS_HOOK_CACHE_DIR\\fR",
              escape("Where the parsed configuration is cached (default /run/mixed-cpus-hook/config-cache)."),
              ".SH FILES"]
    for file_path, what in FILES:
        lines += [".TP", f"\\fI{escape(file_path)}\\fR", escape(what)]
    lines.append(".SH EXIT STATUS")
    for code, what in EXIT_CODES:
        lines += [".TP", f"\\fB{code}\\fR", escape(what)]
    lines += [".PP", escape("Every error is one line on stderr and in the journal (syslog tag mixed-cpus-hook), naming "
                            "what is wrong and where."), ".SH EXAMPLES"]
    for what, command in EXAMPLES:
        lines += [escape(what), ".PP", ".RS 4", ".nf"] + [escape(c) for c in command.split("\n")] + [
            ".fi", ".RE", ".PP"]
    lines += [".SH SEE ALSO", ", ".join(f"\\fB{escape(s.split('(')[0])}\\fR({s.split('(')[1]}" for s in SEE_ALSO),
              ".PP", escape("/usr/share/doc/mixed-cpus-hook/README.md, nri.md and openshift.md.")]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mixed_cpus_hook.frontends.cli.manpage", description=__doc__.splitlines()[0])
    parser.add_argument("--schema", required=True, help="schemas/config.schema.json")
    parser.add_argument("-o", "--output", help="write here instead of stdout")
    args = parser.parse_args(argv)
    with open(args.schema, encoding="utf-8") as f:
        text = compute_manpage(json.load(f))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
