import pytest

from zklocks import ZkLocksError
from zklocks.names import decode_name, encode_name, join_path, validate_name


@pytest.mark.parametrize("name", ["reports:daily", "invoice-42", "A_b:c-9"])
def test_plain_names_map_to_themselves(name):
    assert encode_name(name) == name
    assert join_path("/zklocks", name) == f"/zklocks/{name}"


@pytest.mark.parametrize(
    "name",
    [
        "..",
        ".",
        "/a",
        "a/",
        "a/b",
        "ünïcødé",
        "100%",
        "<script>alert(1)</script>",
        "a b",
        "%41",
        "zookeeper",
        "x" * 200,
    ],
)
def test_any_valid_name_is_one_step_inside_the_namespace_and_round_trips(name):
    node = encode_name(validate_name(name))
    assert "/" not in node and node not in (".", "..")
    assert node.isascii()
    assert decode_name(node) == name
    assert join_path("/ns", name) == "/ns/" + node


def test_encoding_is_injective_on_tricky_pairs():
    names = ["a/b", "a%2Fb", "a%252Fb", "%", "%25", "..", "%2E%2E", "A", "a", ":", "%3A"]
    nodes = [encode_name(n) for n in names]
    assert len(set(nodes)) == len(names)


@pytest.mark.parametrize(
    "bad,reason",
    [
        ("", "empty"),
        ("x" * 201, "limit"),
        ("a\nb", "control"),
        ("a\x00", "control"),
        ("tab\there", "control"),
        ("del\x7f", "control"),
        (42, "str"),
    ],
)
def test_invalid_names_raise_value_error(bad, reason):
    with pytest.raises(ValueError, match=reason) as info:
        validate_name(bad)
    assert isinstance(info.value, ZkLocksError)
