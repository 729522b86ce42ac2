"""Sub-commands of ``ttrain`` (filled in by the modules they front)."""


def register(sub):
    pass
