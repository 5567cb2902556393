"""Realistic failure text for the Slack tests (formats as PyTorch/NCCL print them)."""

NCCL_999 = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/train.py", line 214, in <module>
[rank0]:     main()
[rank0]:   File "/workspace/train.py", line 188, in main
[rank0]:     dist.all_reduce(loss_t)
[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2
[rank0]: ncclUnhandledCudaError: Call to CUDA function failed.
[rank0]: Last error:
[rank0]: Cuda failure 999 'unknown error'
"""

# Rank 1 and 2 waited on rank 3 and the watchdog gave up: a downstream-only report.
WATCHDOG = """\
[rank1]:[E1203 04:12:55.123456 2211 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=81723, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600043 milliseconds before timing out.
[rank2]:[E1203 04:12:55.125001 2212 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=81723, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600045 milliseconds before timing out.
"""

# Rank 3's own log, pasted later in the thread: the error that started it.
RANK3 = """\
[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2
[rank3]: ncclUnhandledCudaError: Call to CUDA function failed.
[rank3]: Last error:
[rank3]: Cuda failure 999 'unknown error'
"""

CHATTER = [
    "anyone know why the h200 queue is so long today?",
    "lgtm, merging after CI",
    "I'll restart the job with NCCL_DEBUG=INFO and report back",
    "training loss at step 12000 is 1.82, looks fine",
]

# An env dump pasted with the failure: every value here must never reach the store or Slack.
SECRETS = {
    "slack": "xoxb-2209318745-5550001112223-Qw8rT1yU2iO3pA4sD5fG6hJ7",
    "github": "ghp_9fK2mN4pQ6rS8tU0vW2xY4zA6bC8dE0fG2hI",
    "hf": "hf_QmZtLpXvRsNwKyJhGfDcBaEoIuYtRe0123",
    "aws_id": "AKIAZ7EXAMPLE4Q3R2T1",
    "aws_secret": "u7Jk2Lm9Np4Qr6St8Vw0Xy3Za5Bc7De9Fg1Hi2Jk",
    "wandb": "8c2f9e41d07b3a65f2e8c1d9b4a7e60f3c5d2b18",
    "password": "Tr0ub4dor&3-horse",
    "key_body": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
}

ENV_DUMP = f"""\
+ env | sort
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7
HF_TOKEN={SECRETS["hf"]}
GITHUB_TOKEN={SECRETS["github"]}
AWS_ACCESS_KEY_ID={SECRETS["aws_id"]}
AWS_SECRET_ACCESS_KEY={SECRETS["aws_secret"]}
WANDB_API_KEY={SECRETS["wandb"]}
SLACK_BOT_TOKEN={SECRETS["slack"]}
DB_PASSWORD={SECRETS["password"]}
NCCL_SOCKET_IFNAME=ib0
-----BEGIN PRIVATE KEY-----
{SECRETS["key_body"]}
-----END PRIVATE KEY-----
"""
