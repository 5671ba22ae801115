"""The dropout masks of the emulated Ascend chip: ``torch_npu._npu_dropout_gen_mask`` and the masks of fused attention.

On the chip a dropout mask is a counter-based draw: element ``i`` of a mask drawn at ``(seed, offset)`` is a
function of ``(seed, offset + i)`` alone, so the backward kernel regenerates the forward's mask from the two
numbers, a mask cut in pieces equals the pieces of one mask, and ``parallel=`` changes nothing. The mask the
vendor hands out is bit-packed: 8 elements a byte, least significant bit first (``numpy.unpackbits(...,
bitorder='little')``), 1 = kept, the length padded to 128 elements (op-plugin DropoutGenMask: 16 bytes).

The emulated chip keeps those properties with its own counter-based generator (splitmix64 of the seed and the
element's counter), not the chip's Philox: a mask drawn here equals a mask drawn here at the same ``(seed,
offset)``, in every op that draws one, forward and backward, which is what the vendor's tests compare; it does not
equal the real chip's bits.

A fused op given no seed (``seed=0``) draws from the device's generator, as the chip takes the generator's Philox
seed and offset: the seed is the generator's ``initial_seed()``, the offset counts the elements drawn since it was
last seeded. So right after ``torch.npu.manual_seed(s)`` a fused op draws the mask ``_npu_dropout_gen_mask(x,
shape, p, seed=s, offset=0)`` gives (the vendor's fused-attention tests build their reference that way).
"""

from __future__ import annotations

from typing import Any

import torch

BYTE_BITS = 8
ALIGN = 128  # elements: the vendor pads a mask to 128 elements (16 bytes)

# splitmix64 (Steele, Lea, Flood 2014), in signed int64 arithmetic (multiplication wraps as in uint64)
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)


def _signed(value: int) -> int:
    """`value` modulo 2**64 as a signed int64."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= (1 << 63) else value


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 values (torch's >> is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def uniform(seed: int, offset: int, numel: int, device: Any = "cpu") -> torch.Tensor:
    """float32 in [0, 1) for the counters offset .. offset + numel - 1 of `seed` (24 bits each)."""
    z = (torch.arange(numel, dtype=torch.int64) + int(offset) + 1) * _GOLDEN + _signed(int(seed) * _MIX2)
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    z = z ^ _shift_right(z, 31)
    u = _shift_right(z, 40).to(torch.float32) * (1.0 / (1 << 24))
    return u if str(device) == "cpu" else u.to(device)


def keep(seed: int, offset: int, numel: int, p: float, device: Any = "cpu") -> torch.Tensor:
    """The keep mask (bool, 1-D) of `numel` elements at (seed, offset) for drop probability `p`."""
    if p <= 0.0:
        return torch.ones(numel, dtype=torch.bool, device=device)
    return uniform(seed, offset, numel, device) >= float(p)


def padded_bytes(numel: int) -> int:
    """The byte length of a packed mask of `numel` elements (padded to ALIGN elements)."""
    return (numel + ALIGN - 1) // ALIGN * ALIGN // BYTE_BITS


def pack(kept: torch.Tensor) -> torch.Tensor:
    """A bool mask as the vendor's bit-packed uint8 mask: LSB first, padded with zero bytes to ALIGN elements."""
    numel = kept.numel()
    whole = (numel + BYTE_BITS - 1) // BYTE_BITS * BYTE_BITS
    bits = torch.zeros(whole, dtype=torch.int32)
    bits[:numel] = kept.reshape(-1).to("cpu", torch.int32)
    weights = torch.tensor([1 << i for i in range(BYTE_BITS)], dtype=torch.int32)
    packed = (bits.reshape(-1, BYTE_BITS) * weights).sum(1).to(torch.uint8)
    out = torch.zeros(padded_bytes(numel), dtype=torch.uint8)
    out[:packed.numel()] = packed
    return out


def unpack(mask: torch.Tensor, numel: int) -> torch.Tensor:
    """The first `numel` elements (bool, 1-D, on the host) of a bit-packed uint8 mask."""
    data = mask.reshape(-1).to("cpu")
    if data.dtype != torch.uint8:
        raise RuntimeError(f"dropout_mask must be the bit-packed uint8 mask _npu_dropout_gen_mask returns, not "
                           f"{data.dtype}")
    if data.numel() * BYTE_BITS < numel:
        raise RuntimeError(f"dropout_mask holds {data.numel() * BYTE_BITS} elements, the attention needs {numel}")
    shifts = torch.arange(BYTE_BITS, dtype=torch.int32)
    bits = (data.to(torch.int32).unsqueeze(1) >> shifts) & 1
    return bits.reshape(-1)[:numel].to(torch.bool)


def gen_mask(numel: int, p: float, seed: int, offset: int) -> torch.Tensor:
    """``_npu_dropout_gen_mask``'s result (on the host): the packed keep mask of `numel` elements. Elements up to
    the next whole byte are drawn, the padding after them is zero, as the vendor's mask of p=0 shows."""
    whole = (numel + BYTE_BITS - 1) // BYTE_BITS * BYTE_BITS
    return pack(keep(seed, offset, whole, p))[:padded_bytes(numel)] if whole else pack(keep(seed, offset, 0, p))


def _fresh_state(seed: int) -> torch.Tensor:
    g = torch.Generator()
    g.manual_seed(seed)
    return g.get_state()


def draw(generator: torch.Generator | None) -> tuple[int, int]:
    """(seed, offset) for a fused op that draws its mask with no seed of its own, from `generator` (the device's;
    None: the host's default). The seed is the generator's; the offset is 0 right after the generator was seeded
    (as the chip's Philox offset), else a multiple of ALIGN drawn from the generator, so it depends only on what
    was drawn since seeding. The generator advances either way: the next op, and any other random op, sees a new
    state."""
    generator = generator if generator is not None else torch.default_generator
    seed = int(generator.initial_seed())
    fresh = torch.equal(generator.get_state(), _fresh_state(seed))
    drawn = int(torch.randint(1, 1 << 40, (1,), generator=generator).item())
    return seed, 0 if fresh else drawn * ALIGN
