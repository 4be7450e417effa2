#!/usr/bin/env python3
"""Submit a job to a mapagg cluster over its HTTP API, wait for it, print its result.

Standard library only. Any worker serves the API; writes need the token in the worker's
--api-token-file.

    python3 mapagg.py --url http://127.0.0.1:8080 --token-file token \
        --type primes --params '{"from":0,"to":1000000,"shards":10}'

The result JSON goes to stdout; the job id and progress go to stderr. Exit status: 0 when the
job succeeded, 1 when it failed or was cancelled, 2 on a refused request.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid


class APIError(Exception):
    """An answer other than success: the HTTP status and the server's message."""

    def __init__(self, status, message):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class Client:
    """A small client of /api/v1."""

    def __init__(self, url, token=None, timeout=30):
        self.base = url.rstrip("/") + "/api/v1"
        self.token = token
        self.timeout = timeout

    def _call(self, method, path, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                message = json.loads(raw).get("error", raw.decode(errors="replace"))
            except ValueError:
                message = raw.decode(errors="replace")
            raise APIError(e.code, message) from None

    def submit(self, job_type, params, key=None, tries=5):
        """Submit a job; returns its id. A bad type or bad params raise APIError (400).

        The submit carries an Idempotency-Key (a new UUID unless key is given), so it is retried
        on a 5xx, a timeout or a dropped connection without ever making a second job: every
        repeat with the key within a day answers the first job's id.
        """
        key = key or str(uuid.uuid4())
        body = {"type": job_type, "params": params}
        pause = 0.25
        for attempt in range(1, tries + 1):
            try:
                return self._call("POST", "/jobs", body, {"Idempotency-Key": key})["id"]
            except APIError as e:
                if e.status < 500 or attempt == tries:
                    raise
            except OSError:
                if attempt == tries:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 4)

    def job(self, job_id):
        return self._call("GET", f"/jobs/{job_id}")

    def result(self, job_id):
        return self._call("GET", f"/jobs/{job_id}/result")

    def cancel(self, job_id):
        return self._call("POST", f"/jobs/{job_id}/cancel")

    def wait(self, job_id, every=0.5, timeout=None, progress=None):
        """Poll until the job ends; returns its last status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                job = self.job(job_id)
            except (APIError, OSError) as e:
                # A worker restarting or a leader changing: keep polling; a missing job is final.
                if isinstance(e, APIError) and e.status in (400, 404):
                    raise
                job = None
            if job is not None:
                if progress:
                    progress(job)
                if job["state"] in ("succeeded", "failed", "cancelled"):
                    return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} did not finish within {timeout} s")
            time.sleep(every)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default=os.environ.get("MAPAGG_URL", "http://127.0.0.1:8080"), help="a worker's HTTP address (env MAPAGG_URL)")
    p.add_argument("--token-file", default=os.environ.get("MAPAGG_TOKEN_FILE"), help="file holding the API token (env MAPAGG_TOKEN_FILE)")
    p.add_argument("--type", required=True, help="job type, e.g. primes")
    p.add_argument("--params", default="{}", help="job parameters as JSON")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the job")
    args = p.parse_args(argv)

    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.read().strip()
    try:
        params = json.loads(args.params)
    except ValueError as e:
        print(f"--params is not valid JSON: {e}", file=sys.stderr)
        return 2

    c = Client(args.url, token)
    try:
        job_id = c.submit(args.type, params)
    except APIError as e:
        print(f"submit refused: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"cannot reach {args.url}: {e}", file=sys.stderr)
        return 1
    print(job_id, file=sys.stderr)

    def progress(job):
        print(f"{job_id} {job['state']} {job['shards_done']}/{job['shards_total']} shards", file=sys.stderr)

    job = c.wait(job_id, timeout=args.timeout, progress=progress)
    if job["state"] != "succeeded":
        print(f"job {job_id} {job['state']}: {job.get('error', '')}", file=sys.stderr)
        return 1
    print(json.dumps(c.result(job_id)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
