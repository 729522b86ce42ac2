"""Golden definition of the parameter-update pipeline (SGD write-back of a store region).

The update pipeline (:class:`ttrain.rtl.update.UpdatePipeline`) streams parameter words
``theta`` and gradient words ``g`` and writes back

    ``theta' = fp32_sub(theta, fp32_mul(lr, g))``,   ``g' = +0``

that is, one separately rounded multiply and one separately rounded subtract (no fused
multiply-add), under the FP32 contract of :mod:`ttrain.golden.numerics`. This equals NumPy
``float32`` ``theta - lr * g`` followed by NaN canonicalization (every NaN result is
``0x7FC00000``). Consequences worth knowing: ``lr = +0`` leaves every finite ``theta`` unchanged
bit for bit, except that a ``-0`` parameter becomes ``+0`` when the product is ``-0``
(``-0 - (+0) = -0`` but ``-0 - (-0) = +0``; the sign of a zero product is
``sign(lr) ^ sign(g)``);
a NaN or infinite gradient with ``lr = 0`` gives NaN (``0 * inf``).

:func:`sweep_region` is the golden of :class:`ttrain.rtl.update.RegionSweeper`: the same
update applied to ``[base, base + length)`` of a parameter store and a gradient store, all
other words untouched, and an error (no write at all) if the region does not fit both stores.

Integer mode (int8 weights of the quantized ZO/LRT training, ``docs/algorithms.md`` section
4): :func:`int_sgd_update` is ``saturate(theta - round_shift(lr_mult * g, shift, mode), bits)``
in exact integer arithmetic, the learning rate being the fixed-point number
``lr_mult / 2**shift``. Golden of :class:`ttrain.rtl.update.IntUpdatePipeline`.
"""

import numpy as np

from .numerics import (Rounding, bits_to_f32, f32_to_bits, fp32_mul, fp32_sub, round_shift,
                       saturate)

__all__ = ["sgd_update", "sgd_update_bits", "sweep_region", "int_sgd_update"]


def _is_bits(x):
    return np.asarray(x).dtype == np.uint32


def sgd_update(theta, grad, lr):
    """Return the SGD-updated parameters ``fp32_sub(theta, fp32_mul(lr, grad))``.

    Parameters
    ----------
    theta, grad : array_like
        Parameters and gradients, broadcast against each other. A ``uint32`` array is taken
        as IEEE-754 bit patterns; anything else as binary32 values (see
        :mod:`ttrain.golden.numerics`: values that are not exactly binary32 are refused).
    lr : array_like
        Learning rate (scalar or broadcastable), bits or value like ``theta``.

    Returns
    -------
    numpy.ndarray
        The new parameters, as ``uint32`` bit patterns if ``theta`` was given as bits, else as
        ``float32`` values. NaN results are :data:`~ttrain.golden.numerics.CANONICAL_NAN`.
    """
    as_bits = _is_bits(theta)
    t, g, r = (bits_to_f32(x) if _is_bits(x) else x for x in (theta, grad, lr))
    new = fp32_sub(t, fp32_mul(r, g))
    return f32_to_bits(new) if as_bits else new


def sgd_update_bits(theta_bits, grad_bits, lr_bits):
    """Return ``(new theta, cleared grad)`` bit patterns, the output stream of the pipeline.

    Parameters
    ----------
    theta_bits, grad_bits : array_like of int
        Bit patterns in ``[0, 2**32)``, same shape.
    lr_bits : int or array_like of int
        Learning-rate bit pattern(s), broadcast against the words.

    Returns
    -------
    tuple of numpy.ndarray
        ``(theta', g')`` as ``uint32``; ``g'`` is all ``+0`` (``0x00000000``).
    """
    t, g, r = (np.asarray(bits_to_f32(x)) for x in (theta_bits, grad_bits, lr_bits))
    new = f32_to_bits(fp32_sub(t, fp32_mul(r, g)))
    return new, np.zeros(np.broadcast(t, g).shape, dtype=np.uint32)


def sweep_region(params, grads, base, length, lr):
    """Apply :func:`sgd_update` to one region of a parameter and a gradient store.

    Parameters
    ----------
    params, grads : array_like of int
        One-dimensional store images as ``uint32`` bit patterns (they may differ in size).
    base, length : int
        The region ``[base, base + length)``, the same word addresses in both stores.
    lr : int
        Learning-rate bit pattern.

    Returns
    -------
    tuple
        ``(new_params, new_grads, error)``: copies of the stores with the region updated (new
        parameters, gradients ``+0``) and ``error`` False; or unchanged copies and ``error``
        True when ``base + length`` exceeds either store (the RTL then writes nothing).

    Raises
    ------
    ValueError
        If ``base`` or ``length`` is negative, or a store is not one-dimensional.
    """
    params = np.array(params, dtype=np.uint32)
    grads = np.array(grads, dtype=np.uint32)
    if params.ndim != 1 or grads.ndim != 1:
        raise ValueError("params and grads must be one-dimensional store images, not arrays "
                         f"of shape {params.shape} and {grads.shape}")
    for name, v in (("base", base), ("length", length)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, not {v!r}")
    base, length = int(base), int(length)
    if base + length > min(len(params), len(grads)):
        return params, grads, True
    region = slice(base, base + length)
    params[region], grads[region] = sgd_update_bits(params[region], grads[region], lr)
    return params, grads, False


def int_sgd_update(theta, grad, lr_mult, shift, *, bits=8, mode=Rounding.HALF_EVEN):
    """Return integer SGD-updated parameters ``saturate(theta - round_shift(lr_mult * grad,
    shift, mode), bits)``.

    Parameters
    ----------
    theta : array_like of int
        Parameters, signed ``bits``-bit integers.
    grad : array_like of int
        Gradients (any int64 integers; the RTL takes ``grad_bits``-bit ones).
    lr_mult : int or array_like of int
        Learning-rate multiplier (signed); ``|lr_mult * grad|`` must stay below ``2**63``.
    shift : int or array_like of int
        Right shift in ``[0, 63]``: the learning rate is ``lr_mult / 2**shift``.
    bits : int
        Width of the signed parameters (8 for int8).
    mode : Rounding or str
        Rounding of the scaled step (default half to even).

    Returns
    -------
    numpy.ndarray
        ``int64`` new parameters in ``[-2**(bits-1), 2**(bits-1) - 1]``.

    Raises
    ------
    ValueError
        If a parameter does not fit in ``bits`` signed bits, or a product overflows int64.
    """
    theta = np.asarray(theta)
    if not np.array_equal(saturate(theta, bits), theta):
        raise ValueError(f"theta holds values outside signed {bits}-bit integers; saturate "
                         "or requantize the parameters first")
    g = np.asarray(grad).astype(np.int64)
    m = np.asarray(lr_mult).astype(np.int64)
    if np.any(np.abs(g.astype(object) * m.astype(object)) >= 2 ** 63):
        raise ValueError("lr_mult * grad overflows int64; use a smaller multiplier")
    step = round_shift(g * m, shift, mode)
    return saturate(theta.astype(np.int64) - step, bits)
