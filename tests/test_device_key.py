"""DeviceInfo.key: the registry's and the stores' card key. SXM boards keep the keys every shipped
entry is filed under; a PCIe or NVL board of the same chip is another card for timing (an H100
PCIe has 114 SMs to the SXM's 132), so it gets a key of its own and is never served entries
measured on the SXM."""
import pytest

from cudal2.device import DeviceInfo


def _dev(name, cc=(9, 0)):
    return DeviceInfo(name=name, cc=cc, smem_per_block=232448, smem_per_sm=233472, regs_per_sm=65536, sm_count=132)


@pytest.mark.parametrize("name,key", [
    ("NVIDIA H200", "h200-sm90"),                    # every h200-sm90 entry's versions.card
    ("NVIDIA H100 80GB HBM3", "h100-sm90"),          # every h100-sm90 entry's versions.card
    ("NVIDIA H100 PCIe", "h100-pcie-sm90"),
    ("NVIDIA H100 NVL", "h100-nvl-sm90"),
    ("NVIDIA H200 NVL", "h200-nvl-sm90"),
    ("NVIDIA H800", "h800-sm90"),
    ("NVIDIA GH200 480GB", "nvidia-gh200-480gb-sm90"),
])
def test_key_per_board(name, key):
    assert _dev(name).key == key


def test_shipped_entries_were_measured_on_the_boards_their_keys_name():
    from cudal2.registry import Registry
    for e in Registry.load().all():
        card = (e.versions or {}).get("card")
        assert card is None or _dev(card).key == e.device, (e.key, card)


def test_a_compile_target_keys_by_architecture():
    assert DeviceInfo.target("sm_90").key == "sm90a"
