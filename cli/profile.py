"""``topos profile``: list the built-in hardware profiles, import one from nvidia-smi output."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.devices.importer import ImportError_, import_files
from agent.devices.profile import ProfileError, list_profiles, load_profile, profile_to_yaml
from cli.errors import CliError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "profile", help="hardware profiles: list built-ins, import from nvidia-smi output"
    )
    sub = parser.add_subparsers(dest="profile_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: _usage(parser))

    ls = sub.add_parser("list", help="list the built-in profiles")
    ls.set_defaults(func=run_list)

    imp = sub.add_parser(
        "import",
        help="make a profile from `nvidia-smi topo -m` (and -q, mig -lgip) output",
        description=(
            "Turn real nvidia-smi output into a profile usable with --profile. Truncated matrices"
            " are accepted when the rows present are whole; what was dropped is reported on stderr."
        ),
    )
    imp.add_argument("--topo", required=True, type=Path, help="`nvidia-smi topo -m` output")
    imp.add_argument("--query", type=Path, help="`nvidia-smi -q` output (text or -x XML)")
    imp.add_argument("--mig", type=Path, help="`nvidia-smi mig -lgip` and/or `-lgi` output")
    imp.add_argument("--name", help="profile name (default: from the --topo file name)")
    imp.add_argument("-o", "--output", type=Path, help="write the profile here (default: stdout)")
    imp.set_defaults(func=run_import)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_list(args: argparse.Namespace) -> int:
    del args
    rows = []
    for name in list_profiles():
        try:
            profile = load_profile(name)
        except ProfileError as exc:  # a broken built-in must not hide the others
            rows.append((name, "?", f"INVALID: {exc}"))
            continue
        product = next((g.product for g in profile.gpus if g.product), "?")
        rows.append((name, f"{len(profile.gpus)}x {product}", profile.description))
    width = max(len(r[0]) for r in rows)
    width2 = max(len(r[1]) for r in rows)
    for name, gpus, description in rows:
        sys.stdout.write(f"{name:<{width}}  {gpus:<{width2}}  {description}\n")
    return 0


def run_import(args: argparse.Namespace) -> int:
    try:
        profile, notes = import_files(
            topo=args.topo, query=args.query, mig=args.mig, name=args.name
        )
    except (ImportError_, ProfileError) as exc:
        raise CliError(str(exc)) from None
    for note in notes:
        print(f"topos: note: {note}", file=sys.stderr)
    text = profile_to_yaml(profile)
    if args.output is None:
        sys.stdout.write(text)
    else:
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        print(f"topos: wrote profile {profile.name!r} to {args.output}", file=sys.stderr)
    return 0
