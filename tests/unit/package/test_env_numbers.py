"""``number_from_env``: the one parser of numeric environment knobs, and the knobs that use it."""

from __future__ import annotations

import pytest

from stratagem._environ import number_from_env


def test_unset_gives_the_default_and_set_gives_the_defaults_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATAGEM_TEST_KNOB", raising=False)
    assert number_from_env("STRATAGEM_TEST_KNOB", 5, meaning="a knob") == 5
    monkeypatch.setenv("STRATAGEM_TEST_KNOB", "0")
    assert number_from_env("STRATAGEM_TEST_KNOB", 5, meaning="a knob", zero_allowed=True) == 0
    monkeypatch.setenv("STRATAGEM_TEST_KNOB", "2.5")
    value = number_from_env("STRATAGEM_TEST_KNOB", 1.0, meaning="a knob")
    assert value == 2.5 and isinstance(value, float)


@pytest.mark.parametrize(("raw", "default", "zero_allowed", "expected"), [
    ("soon", 1.0, False, "a number, above 0"),
    ("0", 1.0, False, "a number, above 0"),
    ("-3", 4, True, "a whole number, 0 or more"),
    ("2.5", 4, True, "a whole number, 0 or more"),
])
def test_bad_text_names_the_variable_its_meaning_and_the_rule(
        monkeypatch: pytest.MonkeyPatch, raw: str, default: float, zero_allowed: bool, expected: str) -> None:
    monkeypatch.setenv("STRATAGEM_TEST_KNOB", raw)
    with pytest.raises(ValueError, match=f"STRATAGEM_TEST_KNOB is a knob: {expected}. Received: "
                                         f"STRATAGEM_TEST_KNOB='{raw}'"):
        number_from_env("STRATAGEM_TEST_KNOB", default, meaning="a knob", zero_allowed=zero_allowed)


def test_horovod_fusion_threshold_and_ps_worker_timeout_use_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from stratagem.distribute import ParameterServerStrategy
    from stratagem.horovod.optimizer import _fusion_threshold

    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "0")
    assert _fusion_threshold() == 0
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "-1")
    with pytest.raises(ValueError, match="HOROVOD_FUSION_THRESHOLD is the most bytes .*Received: "):
        _fusion_threshold()
    monkeypatch.setenv("STRATAGEM_WORKER_TIMEOUT_S", "never")
    with pytest.raises(ValueError, match="STRATAGEM_WORKER_TIMEOUT_S is how many seconds a worker may stay silent"):
        ParameterServerStrategy()  # read before the cluster is
