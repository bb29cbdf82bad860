"""The spec reader: YAML 1.2 typing, duplicate keys, refused tags, and bounded aliases/nesting/size.

Most cases run through ``patchspec validate`` (exit 2, one located message, no traceback); the
typing cases read the parsed data directly, since no built-in schema takes a float or a string yet.
"""

import time
from pathlib import Path

import pytest

from helpers import write_spec
from patchspec.errors import SpecError
from patchspec.spec.reader import MAX_DEPTH, MAX_FILE_BYTES, load_yaml

HEADER = "patchspec: 1\nmodel: m.onnx\noutput: out.onnx\npatches: []\n"


def assert_one_spec_error(result, *fragments):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


# -- YAML 1.2 typing ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1e-5", 1e-5),  # PyYAML (YAML 1.1) reads the string '1e-5'
        ("1.0e-4", 1.0e-4),
        ("-2.5E+3", -2500.0),
        ("no", "no"),  # YAML 1.1: False
        ("yes", "yes"),
        ("on", "on"),
        ("off", "off"),
        ("0755", 755),  # YAML 1.1: octal 493; YAML 1.2 core: decimal
        ("0o755", 0o755),
        ("0x1F", 31),
        ("true", True),
        ("false", False),
        ("~", None),
        ("12", 12),
        ("'1e-5'", "1e-5"),  # quoted stays a string
        ("'no'", "no"),
    ],
)
def test_scalars_are_typed_as_yaml_1_2(tmp_path, text, expected):
    spec = write_spec(tmp_path, f"value: {text}\n")
    value = load_yaml(spec).data["value"]
    assert value == expected and type(value) is type(expected)


def test_keys_stay_as_written(tmp_path):
    spec = write_spec(tmp_path, "no: 1\n1.0: 2\nnull: 3\n")
    assert load_yaml(spec).data == {"no": 1, "1.0": 2, "null": 3}


def test_utf8_bom_is_accepted(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes("\ufeffa: 1\n".encode())
    assert load_yaml(spec).data == {"a": 1}


def test_positions_are_recorded_for_values_and_keys(tmp_path):
    spec = write_spec(tmp_path, "a:\n  - b: 1\n    c: [2, 3]\n")
    document = load_yaml(spec)
    assert document.position(("a", 0, "c")) == document.position(("a", 0, "c"))
    assert (document.position(("a", 0, "c")).line, document.position(("a", 0, "c")).column) == (3, 8)
    key = document.position(("a", 0, "c"), of_key=True)
    assert (key.line, key.column) == (3, 5)


# -- syntax and file problems ------------------------------------------------------------------
def test_syntax_error_names_the_real_file_line_and_column(tmp_path, run_cli):
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: [a, b\npatches: []\n", name="broken.yaml")
    result = run_cli("validate", spec)
    assert_one_spec_error(result, "broken.yaml:", "YAML syntax error")
    first = result.stderr.strip().splitlines()[0]
    place = first.split(": YAML syntax error")[0]
    line, column = place.rsplit(":", 2)[1:]
    assert int(line) >= 3 and int(column) >= 1
    assert "<unicode string>" not in result.stderr


def test_bad_indentation_is_a_located_syntax_error(tmp_path, run_cli):
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\n  output: x\n")
    assert_one_spec_error(run_cli("validate", spec), f"{spec}:3:", "YAML syntax error")


def test_not_utf8_names_file_and_byte(tmp_path, run_cli):
    spec = tmp_path / "latin.yaml"
    spec.write_bytes(HEADER.encode() + "# caf\xe9\n".encode("latin-1"))
    result = run_cli("validate", spec)
    assert_one_spec_error(result, "latin.yaml", "not valid UTF-8", f"byte {len(HEADER) + 5}")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        (b"\x08\x08\x12\x07pytorch\x00\x01\x02", "is an ONNX model, not a spec"),  # a ModelProto's first bytes
        (b"\x89PNG\r\n\x1a\n\x00\x00", "binary file"),
    ],
)
def test_binary_file_is_refused_in_one_line(tmp_path, run_cli, payload, said):
    spec = tmp_path / "model.onnx.yaml"
    spec.write_bytes(payload)
    result = run_cli("validate", spec)
    assert_one_spec_error(result, "model.onnx.yaml", said)
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_spec_is_refused(tmp_path, run_cli, text):
    spec = write_spec(tmp_path, text)
    result = run_cli("validate", spec)
    assert_one_spec_error(result, "spec.yaml", "empty spec")
    assert len(result.stderr.strip().splitlines()) == 1


def test_several_documents_are_refused(tmp_path, run_cli):
    spec = write_spec(tmp_path, HEADER + "---\n" + HEADER)
    assert_one_spec_error(run_cli("validate", spec), f"{spec}:5:1:", "several YAML documents")


def test_control_character_is_refused_with_its_position(tmp_path, run_cli):
    spec = write_spec(tmp_path, HEADER + "x: \x07\n")
    result = run_cli("validate", spec)
    assert_one_spec_error(result, f"{spec}:5:4:", "#x0007 is not allowed")
    assert len(result.stderr.strip().splitlines()) == 1


# -- duplicate keys -----------------------------------------------------------------------------
def test_duplicate_top_level_key_is_located_at_both(tmp_path, run_cli):
    text = "patches: []\npatchspec: 1\nmodel: m.onnx\noutput: out.onnx\n" + "# filler\n" * 4 + "patches: []\n"
    spec = write_spec(tmp_path, text)
    result = run_cli("validate", spec)
    assert_one_spec_error(result, f"{spec}:9:1: duplicate key 'patches' (first at line 1)")


@pytest.mark.parametrize(
    ("body", "key", "line", "first"),
    [
        ("verify:\n  - check:\n      a: 1\n      a: 2\n", "a", 8, 7),  # inside a list item's mapping
        ("verify:\n  - check: {}\n    check: {}\n", "check", 7, 6),  # two types in one item
        ("x:\n  y:\n    z: 1\n    z: 1\n", "z", 8, 7),  # even inside an unknown key
    ],
)
def test_duplicate_nested_key_is_refused(tmp_path, run_cli, body, key, line, first):
    spec = write_spec(tmp_path, HEADER + body)
    result = run_cli("validate", spec)
    assert_one_spec_error(result, f":{line}:", f"duplicate key '{key}' (first at line {first})")


# -- unsafe tags --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "tagged",
    [
        '!!python/object/apply:os.system ["touch {marker}"]',
        "!!python/object/apply:pathlib.Path.touch [!!python/object/apply:pathlib.Path ['{marker}']]",
        "!!python/name:os.system",
        "!!binary aGVsbG8=",
        "!!set {{a}}",
        "!custom value",
    ],
)
def test_unsafe_or_unknown_tag_is_refused_and_nothing_executed(tmp_path, run_cli, tagged):
    marker = tmp_path / "pwned"
    spec = write_spec(
        tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: " + tagged.format(marker=marker) + "\npatches: []\n"
    )
    result = run_cli("validate", spec)
    assert_one_spec_error(result, f"{spec}:3:9:", "is not allowed in a spec")
    assert not marker.exists()


def test_core_tags_are_allowed(tmp_path):
    spec = write_spec(tmp_path, "a: !!str 12\nb: !!int '7'\nc: !!float 1\n")
    assert load_yaml(spec).data == {"a": "12", "b": 7, "c": 1.0}


def test_wrong_core_tag_value_is_a_typed_error(tmp_path):
    spec = write_spec(tmp_path, "a: !!int nope\n")
    with pytest.raises(SpecError, match="'nope' is not a valid int"):
        load_yaml(spec)


# -- bounded resources --------------------------------------------------------------------------
def alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return HEADER + "\n".join(lines) + "\n"


def cyclic_sequence() -> str:
    return HEADER + "x: &loop [1, *loop]\n"


def cyclic_mapping() -> str:
    return HEADER + "x: &loop\n  again: *loop\n"


def deep_flow() -> str:
    return HEADER + "x: " + "[" * (MAX_DEPTH + 6) + "]" * (MAX_DEPTH + 6) + "\n"


def deep_block() -> str:
    return HEADER + "".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 6)) + "  " * (MAX_DEPTH + 6) + "v: 1\n"


def many_aliases() -> str:
    return HEADER + "a: &a 1\nb: [" + ", ".join(["*a"] * 500) + "]\n"


@pytest.mark.parametrize(
    ("make_text", "message"),
    [
        (alias_bomb, "alias bomb"),
        (cyclic_sequence, "cyclic alias '*loop'"),
        (cyclic_mapping, "cyclic alias '*loop'"),
        (deep_flow, f"nesting deeper than {MAX_DEPTH} levels"),
        (deep_block, f"nesting deeper than {MAX_DEPTH} levels"),
        (many_aliases, "aliases; refusing the spec"),
    ],
)
def test_hostile_structure_is_refused_quickly(tmp_path, run_cli, make_text, message):
    run_cli("validate", write_spec(tmp_path, HEADER, name="warm.yaml"))  # imports and plugins loaded: time the parse
    spec = write_spec(tmp_path, make_text())
    started = time.perf_counter()
    result = run_cli("validate", spec)
    elapsed = time.perf_counter() - started
    assert_one_spec_error(result, f"{spec}:", message)
    assert elapsed < 1.0


def test_nesting_at_the_limit_is_accepted(tmp_path):
    depth = MAX_DEPTH - 1  # the root mapping is one level
    spec = write_spec(tmp_path, "x: " + "[" * depth + "]" * depth + "\n")
    assert load_yaml(spec).data["x"] is not None


def test_file_over_16_mib_is_refused_without_parsing(tmp_path, run_cli):
    run_cli("validate", write_spec(tmp_path, HEADER, name="warm.yaml"))
    spec = tmp_path / "huge.yaml"
    with open(spec, "wb") as handle:
        handle.write(HEADER.encode())
        handle.truncate(MAX_FILE_BYTES + 1)  # sparse: quick to make, would take long to parse
    started = time.perf_counter()
    result = run_cli("validate", spec)
    elapsed = time.perf_counter() - started
    assert_one_spec_error(result, "huge.yaml", "16 MiB")
    assert elapsed < 1.0


def test_aliases_within_limits_are_expanded_as_copies(tmp_path):
    spec = write_spec(tmp_path, "base: &b {rtol: 1.0e-4}\nuse: [*b, *b]\n")
    data = load_yaml(spec).data
    assert data["use"] == [{"rtol": 1e-4}, {"rtol": 1e-4}]
    data["use"][0]["rtol"] = 0
    assert data["use"][1]["rtol"] == 1e-4 and data["base"]["rtol"] == 1e-4


def test_reading_a_spec_never_writes_it(tmp_path, run_cli):
    spec = write_spec(tmp_path, alias_bomb())
    before = (spec.read_bytes(), spec.stat().st_mtime_ns)
    run_cli("validate", spec)
    assert (spec.read_bytes(), spec.stat().st_mtime_ns) == before
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["spec.yaml"]
