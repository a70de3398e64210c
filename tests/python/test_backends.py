"""The registries and the selector from Python: listing, reasons, plug-ins."""

import pytest

import lattn

R1 = lattn.MLADimensions(128, 64, 128)


def test_members_in_registry_order():
    assert lattn.prefill_backends()[:4] == ["reference", "cpu", "cuda", "hopper"]
    assert lattn.prefill_backends()[-1] == "CUSTOM"
    assert lattn.decode_backends()[-1] == "CUSTOM"
    assert lattn.mla_backend_priorities("cpu") == ["cpu", "reference"]
    assert lattn.mla_backend_priorities("cuda", lattn.DeviceCapability(9, 0)) == ["hopper", "cuda", "reference"]


def test_every_member_explains_itself():
    config = lattn.SelectorConfig(dtype="bf16", mla_dimensions=R1)
    verdicts = {v.name: v for v in lattn.explain_mla_prefill_backends(config, capability=None)}
    assert verdicts["reference"].valid  # the oracle runs anywhere
    assert verdicts["CUSTOM"].reasons == ["not registered"]
    assert "must be registered before use" in verdicts["CUSTOM"].error
    if not lattn.built_with_cuda():
        assert "required dependencies not available" in verdicts["cuda"].reasons


def test_selection_and_the_seed_refusal_texts():
    config = lattn.SelectorConfig(dtype="f32", mla_dimensions=R1, prefill_backend="CUSTOM")
    with pytest.raises(ValueError, match=r"^MLA prefill backend CUSTOM must be registered before use"):
        lattn.get_mla_prefill_backend(config, capability=None)
    config.prefill_backend = "no_such"
    with pytest.raises(ValueError, match=r"^Unknown MLA prefill backend: 'no_such'. Valid options are: reference, cpu"):
        lattn.get_mla_prefill_backend(config, capability=None)
    config.prefill_backend = "reference"
    assert lattn.get_mla_prefill_backend(config, capability=None).name == "reference"
    cls = lattn.prefill_backend_class("reference")
    assert cls.validate_configuration(None, lattn.SelectorConfig(dtype="f32", mla_dimensions=R1)) == []


def test_plugin_registration(example_plugin_as_custom):
    registry = lattn.mla_prefill_backend_registry()
    assert registry.is_overridden("CUSTOM") and registry.get_path("CUSTOM").endswith(":lattn_example_naive_plugin")
    assert example_plugin_as_custom.name == "example_naive"
    assert example_plugin_as_custom.validate_configuration(lattn.DeviceCapability(9, 0), lattn.SelectorConfig(
        dtype="f32")) == ["compute capability 9.0 not supported"]


def test_a_plugin_that_does_not_load_is_an_import_error():
    registry = lattn.mla_decode_backend_registry()
    lattn.register_mla_decode_backend("CUSTOM", "/nonexistent/libnothing.so:sym")
    try:
        with pytest.raises(ImportError, match=r"/nonexistent/libnothing.so"):
            lattn.decode_backend_class("CUSTOM")
    finally:
        registry.clear_override("CUSTOM")
    assert not registry.is_overridden("CUSTOM")
