"""What a bundle leaves out (core/redact.py): the writer's home as a path's start, and secrets
wherever they were named or written."""

from __future__ import annotations

from tokensleuth.core.redact import REDACTED, home_paths, known_secrets, redact, secret_name


def test_the_home_goes_only_where_it_starts_a_path() -> None:
    obj = {"model": "/home/ann/m.gguf", "source": "git:/home/ann/llama.cpp@abc", "argv": ["-m", "/home/ann/x"],
           "home": "/home/ann", "other": "/home/anna/m.gguf", "deep": "/data/home/ann/m", "log": "loaded /home/ann/m ok",
           "/home/ann/key.gguf": {"n": 1}}
    got, counts = redact(obj, homes=["/home/ann"], known=[])
    assert got == {"model": "~/m.gguf", "source": "git:~/llama.cpp@abc", "argv": ["-m", "~/x"], "home": "~",
                   "other": "/home/anna/m.gguf", "deep": "/data/home/ann/m", "log": "loaded ~/m ok",
                   "~/key.gguf": {"n": 1}}
    assert counts == {"home_paths": 6, "secrets": 0}
    assert home_paths("/") == () and home_paths("/home/ann/") == ("/home/ann",)


def test_secrets_go_where_they_are_named_and_wherever_else_they_were_written() -> None:
    obj = {"arms": [{"env": {"HF_TOKEN": "hf_abcdef123456", "GGML_CUDA_DISABLE_FUSION": "1", "token_budget": "7"},
                     "api_key_env": "OPENAI_API_KEY", "flags": ["-t", "4"]}],
           "engine": {"key": "27002b7fb3cae6324b72", "build_keys": {"a": "k"}},
           "argv": ["llama-server", "--api-key", "sk-secretvalue9", "--hf-token=hf_other12345", "-ngl", "99"],
           "env": {"MY_PASSWORD": "pw-123456"}, "ZED_SECRET": "s3cr3t-value",
           "cpu_ms_per_token": 0.5, "tokens": 8, "api_key": "sk-fieldvalue1",
           "summary": "b (HF_TOKEN=hf_abcdef123456) vs a; run with DB_PASSWORD=hunter22 and GGML_X=1",
           "endpoint": "http://user:pa55word@host:8080/v1?api_key=sk-query12345&model=m",
           "header": "Authorization: Bearer eyJhbGciOi.payload.sig",
           "log": "the writer's key sk-writer-known-123 leaked"}
    got, counts = redact(obj, homes=[], known=["sk-writer-known-123"])
    assert got["arms"][0]["env"] == {"HF_TOKEN": REDACTED, "GGML_CUDA_DISABLE_FUSION": "1", "token_budget": REDACTED}
    assert got["arms"][0]["api_key_env"] == "OPENAI_API_KEY"  # the variable's name, never its value
    assert got["engine"] == obj["engine"] and got["cpu_ms_per_token"] == 0.5 and got["tokens"] == 8
    assert got["argv"] == ["llama-server", "--api-key", REDACTED, f"--hf-token={REDACTED}", "-ngl", "99"]
    assert got["env"] == {"MY_PASSWORD": REDACTED} and got["ZED_SECRET"] == REDACTED and got["api_key"] == REDACTED
    assert got["summary"] == f"b (HF_TOKEN={REDACTED}) vs a; run with DB_PASSWORD={REDACTED} and GGML_X=1"
    assert got["endpoint"] == f"http://{REDACTED}@host:8080/v1?api_key={REDACTED}&model=m"
    assert got["header"] == f"Authorization: Bearer {REDACTED}"
    assert got["log"] == f"the writer's key {REDACTED} leaked"
    text = repr(got)
    for secret in ("hf_abcdef123456", "sk-secretvalue9", "hf_other12345", "pw-123456", "s3cr3t-value", "sk-fieldvalue1",
                   "hunter22", "pa55word", "sk-query12345", "eyJhbGciOi", "sk-writer-known-123"):
        assert secret not in text, secret
    assert counts["secrets"] >= 13 and counts["home_paths"] == 0


def test_a_secret_name_is_one_by_its_parts() -> None:
    assert all(secret_name(n) for n in ("OPENAI_API_KEY", "HF_TOKEN", "--api-key", "db.password", "AWS_SECRET_ACCESS_KEY"))
    assert not any(secret_name(n) for n in ("tokens", "build_keys", "MONKEY", "-t", "KEYS", "TOKENIZER"))
    assert known_secrets({"HF_TOKEN": "hf_long_enough", "SHORT_KEY": "1", "PATH": "/usr/bin"}) == ("hf_long_enough",)
