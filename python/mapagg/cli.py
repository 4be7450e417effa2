"""The mapagg command line: submit jobs to a cluster, wait for them, read their output.

    mapagg [--url URL] [--token-file FILE] --type TYPE [--params JSON]   submit, wait, print result
    mapagg submit --type TYPE [--params JSON] [--no-wait]
    mapagg wait ID | result ID | cancel ID | list [--state S] | output ID [--format tsv|jsonl]

The result JSON or the output goes to stdout; the job id and progress to stderr. Exit status: 0
when the job succeeded, 1 when it failed or was cancelled (or the cluster is unreachable), 2 on
a refused request or bad usage.
"""

import argparse
import json
import os
import sys

from .client import APIError, Client

COMMANDS = ("submit", "wait", "result", "cancel", "list", "output")


def _common(p):
    p.add_argument("--url", default=os.environ.get("MAPAGG_URL", "http://127.0.0.1:8080"), help="a worker's HTTP address (env MAPAGG_URL)")
    p.add_argument("--token-file", default=os.environ.get("MAPAGG_TOKEN_FILE"), help="file holding the API token, for writes (env MAPAGG_TOKEN_FILE)")


def _parser():
    p = argparse.ArgumentParser(prog="mapagg", description=__doc__.splitlines()[0], epilog="Commands: " + ", ".join(COMMANDS))
    _common(p)
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("submit", help="submit a job (and wait for it, unless --no-wait)")
    _common(s)
    s.add_argument("--type", required=True, help="job type: a built-in or a program the workers registered")
    s.add_argument("--params", default="{}", help="job parameters as JSON")
    s.add_argument("--no-wait", action="store_true", help="print the id and return")
    s.add_argument("--timeout", type=float, default=600, help="seconds to wait for the job")
    for name, hlp in (("wait", "wait for a job and print its result"), ("result", "print a job's result"), ("cancel", "cancel a job")):
        c = sub.add_parser(name, help=hlp)
        _common(c)
        c.add_argument("id")
        if name == "wait":
            c.add_argument("--timeout", type=float, default=600, help="seconds to wait")
    ls = sub.add_parser("list", help="list jobs, newest first")
    _common(ls)
    ls.add_argument("--state", help="only jobs in this state")
    ls.add_argument("--limit", type=int, default=20)
    o = sub.add_parser("output", help="print a keyed job's output records")
    _common(o)
    o.add_argument("id")
    o.add_argument("--format", choices=("tsv", "jsonl"), default="tsv")
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] not in COMMANDS and "--type" in argv:
        argv = ["submit"] + argv  # the form of the original example: submit, wait, print
    args = _parser().parse_args(argv)
    if not args.cmd:
        _parser().print_help(sys.stderr)
        return 2
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.read().strip()
    c = Client(args.url, token)
    try:
        return _run(c, args)
    except APIError as e:
        print(f"{args.cmd} refused: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"cannot reach {args.url}: {e}", file=sys.stderr)
        return 1


def _progress(job):
    print(f"{job['id']} {job['state']} {job.get('shards_done', 0)}/{job.get('shards_total', 0)} shards", file=sys.stderr)


def _finish(c, job):
    if job["state"] != "succeeded":
        print(f"job {job['id']} {job['state']}: {job.get('error', '')}", file=sys.stderr)
        return 1
    print(json.dumps(c.result(job["id"])))
    return 0


def _run(c, args):
    if args.cmd == "submit":
        try:
            params = json.loads(args.params)
        except ValueError as e:
            print(f"--params is not valid JSON: {e}", file=sys.stderr)
            return 2
        job_id = c.submit(args.type, params)
        if args.no_wait:
            print(job_id)
            return 0
        print(job_id, file=sys.stderr)
        return _finish(c, c.wait(job_id, timeout=args.timeout, progress=_progress))
    if args.cmd == "wait":
        return _finish(c, c.wait(args.id, timeout=args.timeout, progress=_progress))
    if args.cmd == "result":
        print(json.dumps(c.result(args.id)))
        return 0
    if args.cmd == "cancel":
        print(json.dumps(c.cancel(args.id)))
        return 0
    if args.cmd == "list":
        for job in c.list(state=args.state, limit=args.limit):
            print(f"{job['id']}\t{job['type']}\t{job['state']}")
        return 0
    if args.cmd == "output":
        c.output_text(args.id, sys.stdout.buffer, args.format)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
