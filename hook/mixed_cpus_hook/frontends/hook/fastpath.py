"""The OCI hook entry: ``apply`` and ``release`` with the standard library only.

CRI-O runs the hook on every start of an asking container, so this path must not import
click, PyYAML, jsonschema or psutil. It understands exactly the command lines the hooks.d
file and a manual run use; anything else (``--help``, other commands) returns None and the
caller hands over to the full click CLI.
"""

from __future__ import annotations

import sys

from ...core.errors import EXIT_OK, HookError, StateError, UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Dict, List, Optional, TextIO

    from ...node.config import Config
    from ...node.log import Reporter
    from ...node.oci import State

FAST_COMMANDS = ("apply", "release")


class FastArgs:
    """The parsed fast-path command line."""

    def __init__(self) -> None:
        self.config: Optional[str] = None
        self.command = ""
        self.state: Optional[str] = None
        self.dry_run = False
        self.verbose = False


def parse_fast_args(argv: List[str]) -> Optional[FastArgs]:
    """``[--config P] [-v] (apply|release) [--state F] [--dry-run]``; None for anything else."""
    args = FastArgs()
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not args.command and tok in FAST_COMMANDS:
            args.command = tok
        elif tok in ("--config", "--state") and i + 1 < len(argv):
            if tok == "--config" and not args.command:
                args.config = argv[i + 1]
            elif tok == "--state" and args.command:
                args.state = argv[i + 1]
            else:
                return None
            i += 1
        elif tok.startswith("--config=") and not args.command:
            args.config = tok.split("=", 1)[1]
        elif tok.startswith("--state=") and args.command:
            args.state = tok.split("=", 1)[1]
        elif tok == "--dry-run" and args.command == "apply":
            args.dry_run = True
        elif tok in ("-v", "--verbose") and not args.command:
            args.verbose = True
        else:
            return None
        i += 1
    return args if args.command else None


def run_hook(args: FastArgs, stdin: Optional[TextIO] = None, stdout: Optional[TextIO] = None,
             environ: Optional[Dict[str, str]] = None, reporter: Optional[Reporter] = None) -> int:
    """Run apply or release and turn any HookError into one line, a syslog entry and an exit code."""
    out = stdout if stdout is not None else sys.stdout
    rep = reporter  # the default Reporter is built when needed: a container that does not ask never loads log
    context = ""
    config: Optional[Config] = None
    try:
        state = _read_state(args, stdin)
        context = f"container {state.id}: "
        if args.command == "apply" and state.has_annotations and not _may_ask(state.annotations):
            if args.verbose:  # -v: say why this container is skipped (the usual case logs nothing)
                _reporter(args, rep).info(f"{context}skipped: {_skip_reason(state.annotations)}")
            return EXIT_OK
        from ...node.config import load_config

        config = load_config(args.config, environ=environ)
        rep = _reporter(args, rep)
        text = _run_command(args, state, config, rep, context)
        if text:
            out.write(text)
        return EXIT_OK
    except HookError as exc:
        return _report_failure(args, exc, context, config, rep, environ)


def _read_state(args: FastArgs, stdin: Optional[TextIO]) -> State:
    """The container's OCI state: from ``--state``'s file, else stdin (what the runtime passes)."""
    from ...node.oci import load_state

    if not args.state:
        return load_state(stdin if stdin is not None else sys.stdin)
    from ...node.files import FileRefused, read_regular_file
    from ...node.oci import MAX_STATE_BYTES, parse_state

    try:
        text = read_regular_file(args.state, MAX_STATE_BYTES).decode("utf-8")
    except OSError as exc:
        raise StateError(f"cannot read: {exc.strerror}", args.state) from None
    except (FileRefused, UnicodeDecodeError) as exc:
        raise StateError(f"cannot read the state: {exc}", args.state) from None
    return parse_state(text, args.state)


def _skip_reason(annotations: Dict[str, str]) -> str:
    name = annotations.get("io.kubernetes.container.name")
    return (f"no annotation <prefix>/{name} for it" if name else
            "no io.kubernetes.container.name annotation (not a Kubernetes container)")


def _run_command(args: FastArgs, state: State, config: Config, rep: Reporter, context: str) -> str:
    """Run apply or release; what to print (one line per write; a dry run's "would write" lines)."""
    if args.command == "release":
        from ...usecases.apply import release_state

        return "".join(f"{context}{line}\n" for line in release_state(state, config, rep).lines)
    from ...usecases.apply import apply_state

    outcome = apply_state(state, config, rep, dry_run=args.dry_run)
    if args.dry_run:
        return ("".join(f"would write {line}\n" for line in outcome.lines) or
                f"{context}nothing to write ({outcome.status})\n")
    return "".join(f"{context}{line}\n" for line in outcome.lines)


def _report_failure(args: FastArgs, exc: HookError, context: str, config: Optional[Config], rep: Optional[Reporter],
                    environ: Optional[Dict[str, str]]) -> int:
    """One line (stderr, syslog) for a failure, and the exit code: 0 when failure_policy is ignore.

    A usage error is never ignored; an error before the configuration was read (a bad state)
    reads it now, for its failure_policy.
    """
    if config is None and not isinstance(exc, UsageError):
        config = _policy_config(args, environ)
    ignored = config is not None and config.failure_policy == "ignore" and not isinstance(exc, UsageError)
    suffix = " (ignored: failure_policy is ignore)" if ignored else ""
    _reporter(args, rep).error(f"{context}{exc.kind}: {exc}{suffix}")
    return EXIT_OK if ignored else exc.exit_code


def _policy_config(args: FastArgs, environ: Optional[Dict[str, str]]) -> Optional[Config]:
    """The configuration, read only to learn failure_policy after an early error (bad state).

    None when it cannot be read either: then the error stands (policy "fail").
    """
    from ...node.config import load_config

    try:
        return load_config(args.config, environ=environ)
    except HookError:
        return None


def _reporter(args: FastArgs, reporter: Optional[Reporter]) -> Reporter:
    """``reporter``, else a default Reporter for this command line."""
    if reporter is not None:
        return reporter
    from ...node.log import Reporter

    return Reporter(verbose=args.verbose)


def _may_ask(annotations: Dict[str, str]) -> bool:
    from ...core.request import may_ask

    return may_ask(annotations)
