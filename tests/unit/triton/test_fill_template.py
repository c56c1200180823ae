import subprocess
import sys

import pytest

from scripts.triton.repository.fill_template import (
    TemplateError,
    fill_file,
    fill_repository,
    fill_text,
    main,
    parse_substitutions,
    placeholders,
)

TEMPLATE = """\
name: "tensorrt_llm"
max_batch_size: ${triton_max_batch_size}
dynamic_batching {
  preferred_batch_size: [ ${triton_max_batch_size} ]
}
parameters: {
  key: "stop_words"
  value: { string_value: "${stop_words}" }
}
parameters: {
  key: "lora_cache_max_adapter_size"
  value: { string_value: "${lora_cache_max_adapter_size}" }
}
"""
ALL = {"triton_max_batch_size": "8", "stop_words": "a,b", "lora_cache_max_adapter_size": "64"}


def test_placeholders_are_ordered_and_unique():
    assert placeholders(TEMPLATE) == ["triton_max_batch_size", "stop_words", "lora_cache_max_adapter_size"]
    assert placeholders("no placeholders, $HOME, {x}") == []


def test_parse_substitutions_handles_escapes_and_empty_values():
    parsed = parse_substitutions(r"stop_words:a\,b, engine_dir:/e\:1,path:C\\x,empty:")
    assert parsed == {"stop_words": "a,b", "engine_dir": "/e:1", "path": "C\\x", "empty": ""}
    assert parse_substitutions("") == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a:1,a:2", "key 'a' is given twice"),
        (":1", "empty key"),
        ("a", "has no ':'; write it as key:value"),
        ("a:1:2", r"escape a colon inside the value as '\\:'"),
        ("a:1,,b:2", "substitution 2 is empty"),
        (r"a:x\n", r"'\\n' is not an escape"),
        ("a:x\\", "a trailing"),
    ],
)
def test_parse_substitutions_errors_say_what_to_fix(text, expected):
    with pytest.raises(TemplateError, match=expected):
        parse_substitutions(text)


def test_fill_text_replaces_every_occurrence():
    out = fill_text(TEMPLATE, ALL)
    assert "max_batch_size: 8\n" in out
    assert "preferred_batch_size: [ 8 ]" in out
    assert 'string_value: "a,b"' in out
    assert "${" not in out


def test_fill_text_converts_bools_and_numbers():
    text = "decoupled: ${d}\nmax_batch_size: ${m}\nfrac: ${f}\n"
    assert fill_text(text, {"d": True, "m": 8, "f": 0.5}) == "decoupled: true\nmax_batch_size: 8\nfrac: 0.5\n"
    with pytest.raises(TemplateError, match="value of 'd' is a list"):
        fill_text(text, {"d": [1]}, allow_unfilled=["m", "f"])


def test_unknown_key_is_named_with_the_files_placeholders():
    with pytest.raises(TemplateError) as info:
        fill_text(TEMPLATE, {**ALL, "triton_max_batchsize": "8"}, source="cfg.pbtxt")
    message = str(info.value)
    assert "cfg.pbtxt: unknown key 'triton_max_batchsize'" in message
    assert "did you mean 'triton_max_batch_size'?" in message
    assert "triton_max_batch_size, stop_words, lora_cache_max_adapter_size" in message


def test_leftover_placeholders_are_listed_with_lines():
    with pytest.raises(TemplateError) as info:
        fill_text(TEMPLATE, {"stop_words": "x"}, source="cfg.pbtxt")
    message = str(info.value)
    assert "${triton_max_batch_size} (lines 2, 4)" in message
    assert "${lora_cache_max_adapter_size} (line 12)" in message
    assert "--allow-unfilled triton_max_batch_size,lora_cache_max_adapter_size" in message


def test_allowed_leftovers_stay_in_place():
    values = {k: v for k, v in ALL.items() if k != "lora_cache_max_adapter_size"}
    out = fill_text(TEMPLATE, values, allow_unfilled=["lora_cache_max_adapter_size"])
    assert 'string_value: "${lora_cache_max_adapter_size}"' in out
    assert placeholders(out) == ["lora_cache_max_adapter_size"]


def test_fill_file_writes_dst_and_leaves_template(tmp_path):
    src = tmp_path / "config.pbtxt"
    src.write_text(TEMPLATE)
    dst = fill_file(src, tmp_path / "out" / "config.pbtxt", ALL)
    assert dst.read_text() == fill_text(TEMPLATE, ALL)
    assert src.read_text() == TEMPLATE
    assert fill_file(src, None, ALL) == src
    assert src.read_text() == dst.read_text()


def test_fill_file_writes_nothing_on_error(tmp_path):
    src = tmp_path / "config.pbtxt"
    src.write_text(TEMPLATE)
    with pytest.raises(TemplateError, match="unfilled"):
        fill_file(src, None, {"stop_words": "x"})
    assert src.read_text() == TEMPLATE


def test_cli_prints_to_stdout(tmp_path, capsys):
    src = tmp_path / "config.pbtxt"
    src.write_text(TEMPLATE)
    subs = r"triton_max_batch_size:8,stop_words:a\,b"
    assert main([str(src), subs, "--allow-unfilled", "lora_cache_max_adapter_size"]) == 0
    out = capsys.readouterr().out
    assert out == fill_text(TEMPLATE, {"triton_max_batch_size": "8", "stop_words": "a,b"},
                            allow_unfilled=["lora_cache_max_adapter_size"])
    assert src.read_text() == TEMPLATE


def test_cli_in_place(tmp_path, capsys):
    src = tmp_path / "config.pbtxt"
    src.write_text(TEMPLATE)
    assert main(["-i", str(src), r"triton_max_batch_size:8,stop_words:a\,b,lora_cache_max_adapter_size:64"]) == 0
    assert capsys.readouterr().out == ""
    assert src.read_text() == fill_text(TEMPLATE, ALL)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["{src}", "nope:1"], "unknown key 'nope'"),
        (["{src}", "stop_words:x"], "unfilled placeholders"),
        (["{src}", "a:1,a:2"], "given twice"),
        (["{missing}", "a:1"], "cannot read or write"),
    ],
)
def test_cli_user_mistakes_exit_2_without_traceback(tmp_path, capsys, args, expected):
    src = tmp_path / "config.pbtxt"
    src.write_text(TEMPLATE)
    argv = [a.format(src=src, missing=tmp_path / "missing.pbtxt") for a in args]
    assert main(["-i", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err
    assert "Traceback" not in err
    assert src.read_text() == TEMPLATE


def test_module_entry_point_exits_2(tmp_path):
    src = tmp_path / "config.pbtxt"
    src.write_text(TEMPLATE)
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.triton.repository.fill_template", str(src), "bogus:1"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "unknown key 'bogus'" in proc.stderr
    assert proc.stdout == ""


def _template_repo(root):
    pre = root / "preprocessing"
    (pre / "1" / "__pycache__").mkdir(parents=True)
    (pre / "config.pbtxt").write_text('name: "preprocessing"\nmax_batch_size: ${triton_max_batch_size}\n')
    (pre / "1" / "model.py").write_text("class TritonPythonModel:\n    pass\n")
    (pre / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    (pre / ".ipynb_checkpoints").mkdir()
    ens = root / "ensemble"
    (ens / "1").mkdir(parents=True)
    (ens / "config.pbtxt").write_text('name: "ensemble"\nplatform: "ensemble"\nmax_batch_size: 8\n')
    (root / ".ipynb_checkpoints").mkdir()
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_fill_repository_copies_models_and_leaves_templates(tmp_path):
    templates, out = tmp_path / "templates", tmp_path / "build" / "model_repository"
    before = _template_repo(templates)
    (out / "preprocessing" / "1").mkdir(parents=True)
    (out / "preprocessing" / "1" / "stale.py").write_text("old")
    (out / "other").mkdir()

    written = fill_repository(templates, out, {"preprocessing": {"triton_max_batch_size": 8}})

    assert written == [out.resolve() / "ensemble", out.resolve() / "preprocessing"]
    assert (out / "preprocessing" / "config.pbtxt").read_text() == 'name: "preprocessing"\nmax_batch_size: 8\n'
    assert (out / "preprocessing" / "1" / "model.py").read_text().startswith("class TritonPythonModel")
    assert (out / "ensemble" / "1").is_dir()
    assert not (out / "preprocessing" / "1" / "stale.py").exists()
    assert not (out / "preprocessing" / "1" / "__pycache__").exists()
    assert not (out / "preprocessing" / ".ipynb_checkpoints").exists()
    assert not (out / ".ipynb_checkpoints").exists()
    assert (out / "other").is_dir()
    assert {p: p.read_bytes() for p in templates.rglob("*") if p.is_file()} == before


def test_a_fill_that_changes_nothing_leaves_the_model_folders_untouched(tmp_path):
    """Two notebooks may fill the same repository at the same time (make test's nbval lanes): a model
    that comes out the same is not rewritten, so a Triton loading it never sees it disappear; one
    that changes is swapped in whole, and nothing of the staging is left beside the repository."""
    templates, out = tmp_path / "templates", tmp_path / "build" / "model_repository"
    _template_repo(templates)
    values = {"preprocessing": {"triton_max_batch_size": 8}}
    extra = {"ensemble": {"1/model.json": '{"model": "m"}\n'}}
    fill_repository(templates, out, values, extra_files=extra)
    (out / "preprocessing" / "1" / "__pycache__").mkdir()  # what a Triton that loaded the model leaves
    inodes = {p: p.stat().st_ino for p in out.rglob("*")}
    assert (out / "ensemble" / "1" / "model.json").read_text() == '{"model": "m"}\n'

    fill_repository(templates, out, values, extra_files=extra)
    assert {p: p.stat().st_ino for p in out.rglob("*")} == inodes

    fill_repository(templates, out, {"preprocessing": {"triton_max_batch_size": 4}}, extra_files=extra)
    assert (out / "preprocessing" / "config.pbtxt").read_text() == 'name: "preprocessing"\nmax_batch_size: 4\n'
    assert (out / "ensemble").stat().st_ino == inodes[out / "ensemble"]  # unchanged: untouched
    assert not (out / "preprocessing" / "1" / "__pycache__").exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["model_repository"]


def test_fills_of_the_same_repository_at_the_same_time_all_succeed_with_one_result(tmp_path):
    """05 and 07 fill the Serve repository at the start of the same nbval stage, the first fill of a
    fresh clone included: fillers racing for the same folders each succeed, and the result is whole."""
    from concurrent.futures import ThreadPoolExecutor

    templates = tmp_path / "templates"
    _template_repo(templates)
    values = {"preprocessing": {"triton_max_batch_size": 8}}
    for round_ in range(20):
        out = tmp_path / f"round{round_}" / "model_repository"
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: fill_repository(templates, out, values), range(4)))
        assert all(r == results[0] for r in results)
        assert (out / "preprocessing" / "config.pbtxt").read_text() == 'name: "preprocessing"\nmax_batch_size: 8\n'
        assert sorted(p.name for p in out.parent.iterdir()) == ["model_repository"]


def test_fill_repository_writes_nothing_when_a_model_fails(tmp_path):
    templates, out = tmp_path / "templates", tmp_path / "out"
    _template_repo(templates)
    with pytest.raises(TemplateError, match=r"preprocessing/config.pbtxt: unfilled placeholders"):
        fill_repository(templates, out, {})
    assert not out.exists()


def test_fill_repository_rejects_values_for_unknown_models(tmp_path):
    templates = tmp_path / "templates"
    _template_repo(templates)
    with pytest.raises(TemplateError, match="values given for 'postprocessing'.*ensemble, preprocessing"):
        fill_repository(templates, tmp_path / "out", {"postprocessing": {}})


@pytest.mark.parametrize("relative", [".", "build", "preprocessing/out"])
def test_fill_repository_refuses_output_inside_templates(tmp_path, relative):
    templates = tmp_path / "templates"
    before = _template_repo(templates)
    with pytest.raises(TemplateError, match="inside the template repository"):
        fill_repository(templates, templates / relative, {"preprocessing": {"triton_max_batch_size": 8}})
    assert {p: p.read_bytes() for p in templates.rglob("*") if p.is_file()} == before


def test_fill_repository_refuses_output_containing_templates(tmp_path):
    templates = tmp_path / "templates"
    _template_repo(templates)
    with pytest.raises(TemplateError, match="inside the output directory"):
        fill_repository(templates, tmp_path, {"preprocessing": {"triton_max_batch_size": 8}})


def test_fill_repository_selected_models_only(tmp_path):
    templates = tmp_path / "templates"
    for name in ("a", "b"):
        (templates / name / "1").mkdir(parents=True)
        (templates / name / "config.pbtxt").write_text(f'name: "{name}"\nmax_batch_size: ${{mbs}}\n')
    out = tmp_path / "out"
    written = fill_repository(templates, out, {"a": {"mbs": 4}}, models=["a"])
    assert [p.name for p in written] == ["a"] and not (out / "b").exists()
    with pytest.raises(TemplateError, match="no template model 'c'"):
        fill_repository(templates, out, {}, models=["c"])
    with pytest.raises(TemplateError, match="values given for 'b', not models being filled"):
        fill_repository(templates, out, {"b": {"mbs": 1}}, models=["a"])
