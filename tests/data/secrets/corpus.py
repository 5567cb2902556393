"""The redaction corpus: one entry per secret kind, as it appears in real logs, env dumps, launch
commands, config files and pasted code. Every value is fake (random characters in the provider's
format). Provider prefixes are joined at import time (`"sk_live_" + "..."`) so that no complete
token sits in the repository for a secret scanner to flag.

Each entry: (kind, text as pasted, [substrings of the secret that must not survive redaction]).
Used by tests/redaction/ (the redactor itself) and by the end-to-end tests that check the CLI,
the store, Slack posts and log lines.
"""

from __future__ import annotations

_B64 = "Qm9ndXNLZXlNYXRlcmlhbEZvclRlc3RzT25seTEyMzQ1Njc4OTBhYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ego"
_JWT = ("eyJ" + "hbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9" + ".eyJ" + "zdWIiOiJzdmMtdHJhaW5lciIsImV4cCI6MTc2NDU0MzYwMH0"
        + ".Zm9yZ2VkLXNpZ25hdHVyZS1mb3ItdGVzdHMtb25seS0xMjM0NTY3ODkw")

CORPUS: list[tuple[str, str, list[str]]] = [
    # --- cloud providers ------------------------------------------------------------------------
    ("aws-access-key-id", "AWS_ACCESS_KEY_ID=" + "AKIA" + "QYLPMN5HFIQR7XKM", ["QYLPMN5HFIQR7XKM"]),
    ("aws-temp-key-id", "aws sts: using key " + "ASIA" + "ZK3TQW7RBD2NXF4L", ["ZK3TQW7RBD2NXF4L"]),
    ("aws-secret-env", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYq9Zt3Lm2Nf", ["wJalrXUtnFEMI"]),
    ("aws-credentials-file", "[default]\naws_secret_access_key = 9dK2mP4qR6sT8uV0wX2yZ4aB6cD8eF0gH2iJ4kL6",
     ["9dK2mP4qR6sT8uV0"]),
    ("aws-session-token", "AWS_SESSION_TOKEN=IQoJb3JpZ2luX2VjEDkaCXVzLWVhc3QtMSJHMEUCIQDx7TqVh3Lk9/9Zr2",
     ["IQoJb3JpZ2luX2VjEDka"]),
    ("azure-storage-key", "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=ckpts;"
     "AccountKey=u8Xq3ZpL0vT7rN2kW9yB4mC6dF1gH5jK8sA3eR0tY7iO2pQ4wE6zX9cV1bN5mL8kJ3hG2fD4sA6qW8eR0tY==;"
     "EndpointSuffix=core.windows.net", ["u8Xq3ZpL0vT7rN2k"]),
    ("azure-sas", "blob url: https://ckpts.blob.core.windows.net/runs/step-1000.pt?sv=2022-11-02&ss=b&srt=o"
     "&sp=r&se=2025-12-31T00:00:00Z&sig=Xk3Lm9Qp2Rt7Vw1Zy5Ab8Cd0Ef4Gh6Ij%2BKl3Mn5Op%3D", ["Xk3Lm9Qp2Rt7Vw1Z"]),
    ("azure-client-secret", "AZURE_CLIENT_SECRET=Q7r8Q~Zx2LmN4pK6vB8cD0fG2hJ4kL6mN8pQ0rS2",
     ["Zx2LmN4pK6vB8cD0"]),
    ("gcp-api-key", "google.api_core: request key=" + "AIza" + "SyD3kLm9Qp2Rt7Vw1Zy5Ab8Cd0Ef4Gh6Ijk",
     ["SyD3kLm9Qp2Rt7Vw1Zy5"]),
    ("gcp-api-key-bare", "maps client init with " + "AIza" + "SyB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uVwx",
     ["SyB1cD2eF3gH4iJ5kL6m"]),
    ("gcp-service-account", '{"type": "service_account", "project_id": "train-prod", "private_key": "-----BEGIN '
     'PRIVATE KEY-----\\nMIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDf3kLm9Qp2Rt7V\\n-----END PRIVATE '
     'KEY-----\\n", "client_email": "trainer@train-prod.iam.gserviceaccount.com"}', ["MIIEvgIBADANBgkqhkiG9w0"]),
    ("gcp-oauth-token", "gcloud auth print-access-token -> " + "ya29" + ".a0AfB_byC3kLm9Qp2Rt7Vw1Zy5Ab8Cd0Ef4Gh6Ij",
     ["a0AfB_byC3kLm9Qp2Rt7"]),
    ("gcp-oauth-client-secret", "client_config: " + "GOC" + "SPX-3kLm9Qp2Rt7Vw1Zy5Ab8Cd0Ef4G",
     ["3kLm9Qp2Rt7Vw1Zy5Ab8"]),
    ("databricks-token", "databricks configure: host=https://adb-123.azuredatabricks.net "
     + "dapi" + "3f8a1c9e7b2d4f6a8c0e2b4d6f8a1c3e", ["3f8a1c9e7b2d4f6a8c0e"]),
    ("digitalocean-token", "DO token " + "dop_v1_" + "8f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d",
     ["8f3e2d1c0b9a8f7e6d5c"]),
    # --- code hosts and package registries -------------------------------------------------------
    ("github-classic", "export GITHUB_TOKEN=" + "ghp_" + "R4nd0mF4k3T0k3nF0rT3st5Abcdef012345",
     ["R4nd0mF4k3T0k3nF0rT3"]),
    ("github-oauth", "gh auth status: token " + "gho_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa",
     ["Zx9Yw8Vu7Ts6Rq5Po4Nm"]),
    ("github-fine-grained", "git clone https://x-access-token:" + "github_pat_"
     + "11AQWERTY0abcdefghijklmn_opqrstuvwxyzABCDEFGHIJ0123456789@github.com/org/repo", ["11AQWERTY0abcdefghij"]),
    ("github-url-user", "fatal: could not read from https://" + "ghp_" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8"
     + "@github.com/org/repo.git", ["Q1w2E3r4T5y6U7i8O9p0"]),
    ("gitlab-env", "CI_JOB: GITLAB_TOKEN=" + "glpat-" + "xK3mN8pQ2rT5vW9yZ1bC", ["xK3mN8pQ2rT5vW9yZ1bC"]),
    ("gitlab-bare", "remote: HTTP Basic: Access denied for " + "glpat-" + "Ab3Cd5Ef7Gh9Ij1Kl3Mn", ["Ab3Cd5Ef7Gh9Ij1Kl3Mn"]),
    ("npm-npmrc", "//registry.npmjs.org/:_authToken=" + "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
     ["a1B2c3D4e5F6g7H8i9J0"]),
    ("npm-bare", "npm ERR! using " + "npm_" + "Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa", ["Zy9Xw8Vu7Ts6Rq5Po4Nm"]),
    ("pypi-token", "TWINE_PASSWORD=" + "pypi-" + "AgEIcHlwaS5vcmcCJGE0ZmQ2YjM4LTk1ZWUtNGI5Ny04ZDdlLTBmYjA",
     ["AgEIcHlwaS5vcmcCJGE0"]),
    ("pypi-bare", "uploading with " + "pypi-" + "AgENdGVzdC5weXBpLm9yZwIkNDVmZGQ3YWUtYmE1ZC00NmZh",
     ["AgENdGVzdC5weXBpLm9y"]),
    ("docker-config-auth", '{"auths": {"nvcr.io": {"auth": "JG9hdXRodG9rZW46bnZhcGktZmFrZWtleWZvcnRlc3Rz"}}}',
     ["JG9hdXRodG9rZW46bnZh"]),
    ("docker-login-p", "docker login nvcr.io -u '$oauthtoken' -p Nz9xQ2mK7pL4vT1rW8sY3bC6dF0gH5jA",
     ["Nz9xQ2mK7pL4vT1rW8sY"]),
    ("ngc-api-key", "NGC_CLI_API_KEY=" + "nvapi-" + "Qk3Lm9Qp2Rt7Vw1Zy5Ab8Cd0Ef4Gh6Ij8Kl0Mn2Op4Qr6St8Uv0Wx2Yz4Ab6Cd8E",
     ["Qk3Lm9Qp2Rt7Vw1Zy5Ab"]),
    ("ngc-bare", "ngc config: key " + "nvapi-" + "Zz1Yy2Xx3Ww4Vv5Uu6Tt7Ss8Rr9Qq0Pp1Oo2Nn3Mm4Ll5Kk6Jj7Ii8Hh9Gg0F",
     ["Zz1Yy2Xx3Ww4Vv5Uu6Tt"]),
    # --- chat, AI and SaaS APIs ----------------------------------------------------------------
    ("slack-bot", "SLACK_BOT_TOKEN " + "xoxb-" + "2209318745-5550001112223-Qw8rT1yU2iO3pA4sD5fG6hJ7", ["Qw8rT1yU2iO3"]),
    ("slack-user", "token=" + "xoxp-" + "1234567890-1234567890123-1234567890123-a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6",
     ["a1b2c3d4e5f6a7b8c9d0"]),
    ("slack-app", "socket mode: " + "xapp-" + "1-A0123456789-1234567890123-f0e1d2c3b4a5968778695a4b3c2d1e0f",
     ["f0e1d2c3b4a5968778695a"]),
    ("slack-webhook", "alert -> https://hooks.slack.com/services/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",
     ["Xy7Zq2Lm9Np4Rs6Tu8Vw"]),
    ("openai-legacy", "openai.api_key = " + "sk-" + "Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1Ji0Hg9Fe8Dc7Ba6Zy5Xw4Vu",
     ["Zq8Xw7Vu6Ts5Rq4Po3Nm"]),
    ("openai-bare", "Incorrect API key provided: " + "sk-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2Yz3Ab4Cd5Ef6",
     ["Ab1Cd2Ef3Gh4Ij5Kl6Mn"]),
    ("openai-project", "client = OpenAI(api_key=\"" + "sk-proj-"
     + "Xt9Rw8Qv7Pu6Os5Nr4Mq3Lp2Ko1Jn0ImHl-Gk_Fj9Ei8Dh7Cg6Bf5Ae4Zd3Yc2Xb1Wa0\")", ["Xt9Rw8Qv7Pu6Os5Nr4Mq3"]),
    ("openai-project-bare", "openai.AuthenticationError: Incorrect API key provided: " + "sk-proj-"
     + "Ba9Cb8Dc7Ed6Fe5Gf4Hg3Ih2Ji1Kj0Lk9Ml8Nm7On6Po5Qp4Rq3Sr2Ts1Ut0", ["Ba9Cb8Dc7Ed6Fe5Gf4Hg3"]),
    ("anthropic", "anthropic.AuthenticationError with key " + "sk-ant-" + "api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDc"
     "Ba9Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Ji0Hg9FeDcBa8Zx7Yw6Vu5Ts4Rq3-Po2Nm1AA", ["Zx9Yw8Vu7Ts6Rq5Po4Nm"]),
    ("stripe-secret", "stripe.api_key = '" + "sk_live_" + "51Hq3Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa'",
     ["51Hq3Zx9Yw8Vu7Ts6Rq5"]),
    ("stripe-restricted", "billing worker started with " + "rk_live_" + "51Hq3Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0",
     ["51Hq3Ab1Cd2Ef3Gh4Ij5"]),
    ("stripe-webhook-secret", "STRIPE_WEBHOOK_SECRET=" + "whsec_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
     ["Zx9Yw8Vu7Ts6Rq5Po4Nm"]),
    ("sendgrid", "mail: sending with " + "SG." + "ngeVfQFYQlKU0ufo8x5d1A.TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr",
     ["ngeVfQFYQlKU0ufo8x5d1A", "TwL2iGABf9DHoTf"]),
    ("hf-token", "HF_TOKEN=" + "hf_" + "QmZtLpXvRsNwKyJhGfDcBaEoIuYtRe0123", ["QmZtLpXvRsNwKyJhGfDc"]),
    ("hf-token-bare", "huggingface_hub: token " + "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567", ["AbCdEfGhIjKlMnOpQrSt"]),
    ("hf-token-flag", "python -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3-70B --hf-token "
     "Tk4Lm9Qp2Rt7Vw1Zy5Ab8Cd0Ef4Gh6Ij --tensor-parallel-size 8", ["Tk4Lm9Qp2Rt7Vw1Zy5Ab"]),
    ("wandb-env", "WANDB_API_KEY=8c2f9e41d07b3a65f2e8c1d9b4a7e60f3c5d2b18", ["8c2f9e41d07b3a65f2e8"]),
    ("wandb-login", "wandb login 4a7e60f3c5d2b188c2f9e41d07b3a65f2e8c1d9b", ["4a7e60f3c5d2b188c2f9"]),
    ("wandb-netrc", "machine api.wandb.ai\n  login user\n  password 1d9b4a7e60f3c5d2b188c2f9e41d07b3a65f2e8c",
     ["1d9b4a7e60f3c5d2b188"]),
    ("twilio-api-key", "twilio: auth with " + "SK" + "3f8a1c9e7b2d4f6a8c0e2b4d6f8a1c3e", ["3f8a1c9e7b2d4f6a8c0e"]),
    ("twilio-sid-token", "client = Client(\"" + "AC" + "9e7b2d4f6a8c0e2b4d6f8a1c3e3f8a1c\", "
     "\"7b2d4f6a8c0e2b4d6f8a1c3e3f8a1c9e\")", ["9e7b2d4f6a8c0e2b4d6f", "7b2d4f6a8c0e2b4d6f8a"]),
    ("telegram-bot", "notify: https://api.telegram.org/bot" + "7123456789:AA" + "Hk3Lm9Qp2Rt7Vw1Zy5Ab8Cd0Ef4Gh6Ij8K"
     "/sendMessage", ["Hk3Lm9Qp2Rt7Vw1Zy5Ab"]),
    ("discord-webhook", "https://discord.com/api/webhooks/123456789012345678/"
     "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe", ["Zx9Yw8Vu7Ts6Rq5Po4Nm"]),
    ("sentry-dsn", "sentry_sdk.init(dsn='https://3f8a1c9e7b2d4f6a8c0e2b4d6f8a1c3e@o123456.ingest.sentry.io/42')",
     ["3f8a1c9e7b2d4f6a8c0e"]),
    ("vault-token", "VAULT: using " + "hvs." + "CAESIJk3Lm9Qp2Rt7Vw1Zy5Ab8Cd0Ef4Gh6Ij8KlGh4KHGh2cy5", ["CAESIJk3Lm9Qp2Rt7Vw1"]),
    ("grafana-sa", "grafana token " + "glsa_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe_3f8a1c9e", ["Zx9Yw8Vu7Ts6Rq5Po4Nm"]),
    ("replicate", "REPLICATE: " + "r8_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa9", ["Zx9Yw8Vu7Ts6Rq5Po4Nm"]),
    ("groq", "groq client with " + "gsk_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa9Zx8Yw7Vu6Ts5Rq4Po3", ["Zx9Yw8Vu7Ts6Rq5Po4Nm"]),
    ("age-key", "AGE-SECRET-KEY-" + "1QQPHZ3LM9QP2RT7VW1ZY5AB8CD0EF4GH6IJ8KL0MN2OP4QR6ST8UV0WX2",
     ["1QQPHZ3LM9QP2RT7VW1Z"]),
    ("kaggle-json", '{"username":"alice","key":"3f8a1c9e7b2d4f6a8c0e2b4d6f8a1c3e"}', ["3f8a1c9e7b2d4f6a8c0e"]),
    # --- databases and URLs ----------------------------------------------------------------------
    ("postgres-url", "sqlalchemy: postgresql://trainer:s3cr3tP4ss@db.internal:5432/runs", ["s3cr3tP4ss"]),
    ("postgres-short", "DATABASE_URL=postgres://metrics:Pg-Xq92!kLm@10.0.0.5/metrics", ["Pg-Xq92!kLm"]),
    ("redis-empty-user", "celery broker redis://:R3d1sP4ssw0rd@redis.internal:6379/0", ["R3d1sP4ssw0rd"]),
    ("mongodb-url", "mongodb+srv://ml:M0ng0-Pw-77@cluster0.x1y2z.mongodb.net/exp", ["M0ng0-Pw-77"]),
    ("amqp-url", "kombu: amqp://guest:Gu3stRabb1t@rabbit:5672//", ["Gu3stRabb1t"]),
    ("mysql-p-flag", "+ mysql -h db.internal -u root -pMyS3cr3tPw runs_db < schema.sql", ["MyS3cr3tPw"]),
    ("mysql-pwd-env", "MYSQL_PWD=Qz8rX2mP9w mysqldump runs > dump.sql", ["Qz8rX2mP9w"]),
    ("pgpassword-env", "PGPASSWORD=pG4ss-w0rd-91 psql -h db -U trainer -c 'select 1'", ["pG4ss-w0rd-91"]),
    ("db-password-env", "DB_PASSWORD=Tr0ub4dor&3-horse", ["Tr0ub4dor"]),
    ("curl-user", "+ curl -sS -u alice:Cu7lP4ss99 https://artifacts.internal/ckpt.tar", ["Cu7lP4ss99"]),
    # --- tokens in general forms ---------------------------------------------------------------
    ("jwt", "kube: using token " + _JWT, ["zdWIiOiJzdmMtdHJhaW5lci", "Zm9yZ2VkLXNpZ25hdHVyZS1m"]),
    ("pem-rsa", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq" + _B64[:40] + "\n" + _B64 + "\n"
     "-----END RSA PRIVATE KEY-----", ["MIIEpAIBAAKCAQEA7bq", _B64[:30]]),
    ("pem-openssh", "[rank0]: -----BEGIN OPENSSH PRIVATE KEY-----\n[rank0]: b3BlbnNzaC1rZXktdjEAAAAABG5vbmU"
     "\n[rank0]: " + _B64, ["b3BlbnNzaC1rZXktdjEAAAAA", _B64[:30]]),
    ("pem-ec", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBf3kLm9Qp2Rt7Vw1Zy5Ab8Cd0Ef4Gh6Ij8\n-----END EC PRIVATE KEY-----",
     ["MHcCAQEEIBf3kLm9Qp2Rt7"]),
    ("pem-pgp", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGXk3LmBCAC5" + _B64 + "\n-----END PGP PRIVATE KEY BLOCK-----",
     ["lQOYBGXk3LmBCAC5", _B64[:30]]),
    ("auth-bearer", "Authorization: Bearer Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe", ["Zx9Yw8Vu7Ts6Rq5Po4Nm"]),
    ("auth-basic", "> Authorization: Basic YWxpY2U6Q3U3bFA0c3M5OQ==", ["YWxpY2U6Q3U3bFA0c3M5OQ"]),
    ("auth-dict", "requests.post(url, headers={'Authorization': 'Bearer Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8'})",
     ["Ab1Cd2Ef3Gh4Ij5Kl6Mn"]),
    ("auth-json", '{"headers": {"Authorization": "Bearer Qr9St0Uv1Wx2Yz3Ab4Cd5Ef6"}}', ["Qr9St0Uv1Wx2Yz3Ab4Cd"]),
    ("bearer-bare", "retrying request with bearer Mn7Op8Qr9St0Uv1Wx2Yz3Ab4", ["Mn7Op8Qr9St0Uv1Wx2Yz"]),
    ("x-api-key-header", "-H 'X-Api-Key: Kq2Lr3Ms4Nt5Ou6Pv7Qw8Rx'", ["Kq2Lr3Ms4Nt5Ou6Pv7Qw"]),
    ("json-password", '{"user": "svc-train", "password": "hunter2-Xq9!"}', ["hunter2-Xq9"]),
    ("dict-api-key", "config = {'api_key': 'Ck9Dl0Em1Fn2Go3Hp4Iq5Jr', 'region': 'us-east-1'}", ["Ck9Dl0Em1Fn2Go3Hp4Iq"]),
    ("json-token", '{"access_token":"Wz8Xy9Za0Ab1Bc2Cd3De4Ef","token_type":"bearer"}', ["Wz8Xy9Za0Ab1Bc2Cd3De"]),
    ("yaml-secret", "  client_secret: Gh5Hi6Ij7Jk8Kl9Lm0Mn1No", ["Gh5Hi6Ij7Jk8Kl9Lm0Mn"]),
    ("kwarg-password", "connect(host='db', user='ml', password='Pw-kwarg-2931')", ["Pw-kwarg-2931"]),
    ("flag-password", "python train.py --password hunter2-xyz --lr 3e-4", ["hunter2-xyz"]),
    ("flag-token", "torchrun train.py --token=Tq8Rr9Ss0Tt1Uu2Vv3Ww --epochs 3", ["Tq8Rr9Ss0Tt1Uu2Vv3Ww"]),
    ("flag-api-key", "python eval.py --openai-api-key Xa1Yb2Zc3Ad4Be5Cf6Dg7 --model gpt", ["Xa1Yb2Zc3Ad4Be5Cf6Dg7"]),
    ("flag-token-space", "deepspeed run.py --wandb_token 7e60f3c5d2b188c2f9e41d07b3a65f2e", ["7e60f3c5d2b188c2f9e4"]),
    ("env-secret-key", "DJANGO_SECRET_KEY=dj4ng0-s3cr3t-k3y-Zq8Xw7Vu6Ts5", ["dj4ng0-s3cr3t-k3y"]),
    ("env-api-key", "export COMET_API_KEY=Ez8Fy9Gz0Ha1Ib2Jc3Kd4Le", ["Ez8Fy9Gz0Ha1Ib2Jc3Kd"]),
    ("env-neptune", "NEPTUNE_API_TOKEN=eyJhcGlfYWRkcmVzcyI6Imh0dHBzOi8vYXBwLm5lcHR1bmUuYWkifQ==", ["eyJhcGlfYWRkcmVzcyI6"]),
]

# Lines that look a bit like secrets and must come through untouched (false positives cost a
# diagnosis: an NCCL setting, a pid or a token count lost from the answer).
CLEAN = [
    "[rank0]: Cuda failure 999 'unknown error'",
    "NCCL_SOCKET_IFNAME=ib0 NCCL_IB_HCA=mlx5_0,mlx5_1",
    "PWD=/home/alice/runs/llama OLDPWD=/home/alice",
    "max_tokens=4096 num_key_value_heads=8",
    "python -m vllm serve --max-num-batched-tokens 8192 --max-model-len 32768",
    "--tokenizer meta-llama/Llama-3-8B --pad-token-id 0",
    "gpu-node-17:4242:4290 [3] NCCL WARN Cuda failure 'unknown error'",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317",
    "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=81723)",
    "sk-learn is not a package name, did you mean scikit-learn?",
    "task-skeleton-1234: ACK 0x1f2e3d4c",
    "srun: error: gpu-node-03: task 12: Exited with exit code 1",
    "mysql: [Warning] Using a password on the command line interface can be insecure.",
    "psql: error: FATAL:  password authentication failed for user \"trainer\"",
    "Using bearer authentication for the registry",
    "ssh: connect to host gpu-node-17 port 22: Connection refused",
    "[2024-06-01 12:00:00] INFO tokens/s: 4312.5 step 1200 loss 1.82",
    "RuntimeError: CUDA error: an illegal memory access was encountered (key=value pairs follow)",
    "docker run --gpus all -p 8080:8080 nvcr.io/nvidia/pytorch:24.05-py3",
    "hf_hub_download(repo_id='meta-llama/Llama-3-8B', filename='config.json')",
    "https://github.com/NVIDIA/nccl/issues/1234",
    "AccountName=ckpts;EndpointSuffix=core.windows.net",
]
