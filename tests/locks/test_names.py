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


@pytest.mark.parametrize(
    "char",
    [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)],
)
def test_bidi_controls_are_refused_with_a_clear_error(char):
    with pytest.raises(ValueError, match="bidirectional control") as info:
        validate_name(f"invoice:{char}42")
    text = str(info.value)
    assert "bidirectional control" in text and f"U+{ord(char):04X}" in text, text


@pytest.mark.parametrize("char", ["\u200b", "\u2060", "\ufeff", "\u00ad"])
def test_other_invisible_format_characters_are_refused(char):
    with pytest.raises(ValueError, match="invisible format character"):
        validate_name(f"a{char}b")


def test_joiners_that_scripts_and_emoji_need_stay_valid():
    for name in ("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", "family:\U0001f468\u200d\U0001f469"):
        assert decode_name(encode_name(validate_name(name))) == name


def test_zk_lock_refuses_a_bidi_name_before_any_request():
    from zklocks import InvalidLockName, zk_lock

    with pytest.raises(InvalidLockName, match="U\\+202E"):
        zk_lock("user:\u202e1234")


def test_shown_escapes_what_could_pose_as_another_name():
    from zklocks.names import shown

    assert shown("orders:42") == "orders:42" and shown("ü-ñ") == "ü-ñ"
    assert shown("invoice-\u202efdp.exe") == "invoice-\\u202efdp.exe"
    assert shown("split\u2028line") == "split\\u2028line"
    assert shown("tab\there") == "tab\\x09here"
    # the text of an escape never reads as the character it names
    assert shown("x\\u202e") == "x\\\\u202e" != shown("x\u202e")
    assert shown("tag\U000e0067") == "tag\\U000e0067"


def test_filled_values_cannot_fake_the_templates_separators():
    """ "report:{account_id}" given "42:pdf" was "report:42:pdf": the key of another call (or task) whose template
    is "report:{account_id}:{kind}". Values escape %, : and / (%25, %3A, %2F); the template's own do not."""
    from zklocks.execution.keys import lock_name

    def one(account_id):
        pass

    def two(account_id, kind):
        pass

    forged = lock_name("t.one", one, "report:{account_id}", ("42:pdf",), {})
    genuine = lock_name("t.two", two, "report:{account_id}:{kind}", (42, "pdf"), {})
    assert (forged, genuine) == ("report:42%3Apdf", "report:42:pdf")
    assert lock_name("t.one", one, "orders/{account_id}", ("7/../8",), {}) == "orders/7%2F..%2F8"
    assert lock_name("t.one", one, "r:{account_id}", ("100%3A",), {}) == "r:100%253A"  # the escape escapes too
    assert lock_name("t.one", one, "n:{account_id:04d}", (7,), {}) == "n:0007"  # format specs still apply
