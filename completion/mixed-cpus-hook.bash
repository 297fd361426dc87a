# bash completion for mixed-cpus-hook(8), installed as
# /usr/share/bash-completion/completions/mixed-cpus-hook (bash-completion sources it on the first
# <Tab> after the command). The completion itself comes from the command's click, whose protocol
# changed between versions: click 8 answers _MIXED_CPUS_HOOK_COMPLETE=bash_source, RHEL 9's
# click 7.1 answers source_bash. Ask with the new spelling, fall back to the old one.
_mixed_cpus_hook_source() {
    local script
    script=$(_MIXED_CPUS_HOOK_COMPLETE=bash_source mixed-cpus-hook 2>/dev/null)
    case $script in
    *"complete "*) ;;
    *) script=$(_MIXED_CPUS_HOOK_COMPLETE=source_bash mixed-cpus-hook 2>/dev/null) ;;
    esac
    case $script in
    *"complete "*) eval "$script" ;;
    esac
}
_mixed_cpus_hook_source
unset -f _mixed_cpus_hook_source
