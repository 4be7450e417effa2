#!/usr/bin/env python3
"""Submit a job to a mapagg cluster with the mapagg package's Client, wait for it, print its result.

    pip install ./python                       # or run from a checkout: it finds ../../python
    python3 submit.py --url http://127.0.0.1:8080 --token-file token \
        --type primes --params '{"from":0,"to":1000000,"shards":10}'

The result JSON goes to stdout; the job id and progress go to stderr. Exit status: 0 when the
job succeeded, 1 when it failed or was cancelled, 2 on a refused request.
"""

import argparse
import json
import os
import sys

try:
    import mapagg
except ImportError:  # not installed: use the package of this checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import mapagg


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default=os.environ.get("MAPAGG_URL", "http://127.0.0.1:8080"), help="a worker's HTTP address")
    p.add_argument("--token-file", help="file holding an API token with the submit role")
    p.add_argument("--type", required=True, help="job type, e.g. primes")
    p.add_argument("--params", default="{}", help="job parameters as JSON")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the job")
    args = p.parse_args()
    try:
        params = json.loads(args.params)
    except ValueError as e:
        sys.exit(f"--params is not valid JSON: {e}")
    token = open(args.token_file).read().strip() if args.token_file else None

    c = mapagg.Client(args.url, token)
    try:
        job_id = c.submit(args.type, params)  # safe to retry: it carries an Idempotency-Key
    except mapagg.APIError as e:
        print(f"submit refused: {e}", file=sys.stderr)
        return 2
    print(job_id, file=sys.stderr)
    job = c.wait(job_id, timeout=args.timeout,
                 progress=lambda j: print(f"{job_id} {j['state']} {j['shards_done']}/{j['shards_total']} shards", file=sys.stderr))
    if job["state"] != "succeeded":
        print(f"job {job_id} {job['state']}: {job.get('error', '')}", file=sys.stderr)
        return 1
    print(json.dumps(c.result(job_id)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
