#!/bin/bash
# gpu-triage EpilogSlurmctld: hand the job to the detached notifier and return at once.
#
# slurm.conf:  EpilogSlurmctld=/etc/slurm/gpu-triage/epilog_slurmctld.sh
#
# Runs on the controller as SlurmUser for every job that got an allocation, with no PATH (hence
# absolute paths) and while the job is still COMPLETING: its final state is not known yet, so the
# notifier (triage_notify.py, next to this script) waits for it. setsid -f detaches it, and the
# redirections matter: slurmscriptd waits for the epilog's pipes to close. Always exit 0: the
# epilog's status must never affect the job or the controller.
PYTHON=/usr/bin/python3
here=${BASH_SOURCE[0]%/*}
conf=${TRIAGE_NOTIFY_CONF:-$here/notify.conf}
case ${SLURM_JOB_ID:-} in
  ''|*[!0-9]*) exit 0 ;;   # ids only ever reach the notifier as plain digits
esac
/usr/bin/setsid -f "$PYTHON" "$here/triage_notify.py" --config "$conf" job-end "$SLURM_JOB_ID" \
  </dev/null >/dev/null 2>&1
exit 0
