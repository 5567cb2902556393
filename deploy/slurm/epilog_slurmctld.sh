#!/bin/bash
# gpu-triage EpilogSlurmctld: hand jobs that may have failed to the detached notifier; a clean end
# costs no Python and no polling.
#
# slurm.conf:  EpilogSlurmctld=/etc/slurm/gpu-triage/epilog_slurmctld.sh
# Already have an EpilogSlurmctld? Slurm runs one script: name yours in notify.conf
# (`chain_epilog = /path/to/yours`: run first, same environment) or call this one from yours.
#
# Runs on the controller as SlurmUser for every job that got an allocation, with no PATH (hence
# absolute paths), while the job is still COMPLETING. What slurmctld passes (measured on 22.05):
# SLURM_JOB_EXIT_CODE2 (the batch script's exit:signal) and SLURM_JOB_DERIVED_EC (the highest
# step's wait status), no job state. Non-zero is a failure: the notifier starts. 0:0 is a clean
# exit, or an end that had no exit status yet: time limit, scancel, node failure. One
# `scontrol show job` (no waiting) reads the Reason slurmctld already recorded (TimeLimit,
# NodeDown, ...); Reason=None is a clean exit or a scancel, which ends here unless CANCELLED is a
# notified state (only then must the notifier wait for the final state to tell them apart).
#
# At most max_notifiers notifiers run at once (one flock slot each, picked by job id); the rest
# wait for a slot as a sleeping flock(1) process, not as Python. setsid -f detaches, and the
# redirections matter: slurmscriptd waits for the epilog's pipes to close. Always exit 0: the
# epilog's status must never affect the job or the controller.
PYTHON=/usr/bin/python3
umask 077  # the spool and its slot files: SlurmUser's only
here=${BASH_SOURCE[0]%/*}
conf=${TRIAGE_NOTIFY_CONF:-$here/notify.conf}
job=${SLURM_JOB_ID:-}

setting() {  # setting KEY DEFAULT: the last `KEY = value` of notify.conf, comments stripped
  local v
  v=$(/usr/bin/sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\\([^#]*\\).*/\\1/p" "$conf" 2>/dev/null | /usr/bin/tail -n 1)
  v=${v%"${v##*[![:space:]]}"}
  printf '%s' "${v:-$2}"
}
note() {  # one line in the notifier's log, as the notifier writes them
  printf '%s job=%s %s\n' "$(/usr/bin/date +%Y-%m-%dT%H:%M:%S)" "$job" "$1" >>"$(setting log_file /var/log/slurm/gpu-triage-notify.log)" 2>/dev/null
}

chain=$(setting chain_epilog "")
if [ -n "$chain" ] && [ -x "$chain" ]; then
  "$chain" </dev/null >/dev/null 2>&1  # the site's own epilog first, its status ignored like ours
fi

case $job in
  ''|*[!0-9]*) exit 0 ;;   # ids only ever reach the notifier as plain digits
esac

ec2=${SLURM_JOB_EXIT_CODE2:-}
derived=${SLURM_JOB_DERIVED_EC:-0}
reason=""
if [ "$ec2" = "0:0" ] && [ "$derived" = "0" ]; then
  scontrol=$(setting scontrol /usr/bin/scontrol)
  slurm_conf=$(setting slurm_conf "")
  # The multi-line form: Reason sits on the line that starts with JobState=. A job name with a
  # newline can forge such a line; then there are two, the reason stays unknown, the notifier decides.
  reasons=$(SLURM_CONF=${slurm_conf:-${SLURM_CONF:-}} /usr/bin/timeout 10 "$scontrol" show job "$job" 2>/dev/null |
    /usr/bin/sed -n 's/^   JobState=[^ ]* Reason=\([^ ]*\).*/\1/p')
  case $reasons in *$'\n'*) ;; *) reason=$reasons ;; esac
  if [ "$reason" = "None" ]; then
    case ",$(setting states FAILED,NODE_FAIL,OUT_OF_MEMORY,TIMEOUT | /usr/bin/tr -d '[:space:]')," in
      *,CANCELLED,*) ;;   # a scancel also ends 0:0 with Reason=None: the notifier waits for the final state
      *) note "ended 0:0 with Reason=None (a clean exit, or a scancel): not notified, no notifier started"; exit 0 ;;
    esac
  fi
fi

slots=$(setting max_notifiers 4)
case $slots in ''|*[!0-9]*|0) slots=4 ;; esac
spool=$(setting spool_dir /var/spool/gpu-triage)
lock="$spool/.notifier-slot.$((job % slots))"
cmd=("$PYTHON" "$here/triage_notify.py" --config "$conf" job-end "$job" --reason "${reason:-unknown}")
if /usr/bin/mkdir -p -m 0700 "$spool" 2>/dev/null && : >>"$lock" 2>/dev/null; then
  /usr/bin/setsid -f /usr/bin/flock "$lock" "${cmd[@]}" </dev/null >/dev/null 2>&1
else
  # No slot file (spool not writable): start it unbounded rather than lose the job; it says why.
  /usr/bin/setsid -f "${cmd[@]}" </dev/null >/dev/null 2>&1
fi
exit 0
