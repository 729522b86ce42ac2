"""Placeholder until this command lands."""


def register(sub):
    pass
