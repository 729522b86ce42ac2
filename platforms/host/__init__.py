"""ttrain.platforms.host: the host runtime, the library side that drives a chip.

``ttrain.platforms.host.driver``
    :class:`~ttrain.platforms.host.driver.KernelDriver` (command and result buffers of the one
    host protocol, :mod:`ttrain.platforms.protocol`) and the card's backend
    :class:`~ttrain.platforms.host.driver.XrtBackend`.
``ttrain.platforms.host.chip``
    training sessions on the simulated chip (:class:`~ttrain.platforms.host.chip.ChipRun`) and
    the chip's step for the one training loop of :func:`ttrain.golden.train.train`
    (:class:`~ttrain.platforms.host.chip.ChipStepper`, :func:`~ttrain.platforms.host.chip.
    train_on_chip`).

The runtime may use every other platform module; none of them uses it.
"""
