"""The ``ttrain`` command line."""

import argparse
import sys


def build_parser():
    parser = argparse.ArgumentParser(prog="ttrain", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from . import commands
    commands.register(sub)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except (ValueError, FileNotFoundError) as exc:
        print(f"ttrain {args.command}: error: {exc}", file=sys.stderr)
        return 2
