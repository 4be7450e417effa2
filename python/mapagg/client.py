"""A client of a mapagg cluster's HTTP API (/api/v1): submit, wait, list, cancel, result, output.

Any worker serves the API; writes need the token of the worker's --api-token-file.
"""

import json
import time
import uuid
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["Client", "APIError", "JobFailed"]

FINAL = ("succeeded", "failed", "cancelled")


class APIError(Exception):
    """An answer other than success: the HTTP status and the server's message."""

    def __init__(self, status, message):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class JobFailed(Exception):
    """A job that ended other than succeeded; .job is its last status."""

    def __init__(self, job):
        super().__init__(f"job {job.get('id')} {job.get('state')}: {job.get('error', '')}")
        self.job = job


class Client:
    """A client of /api/v1 at url (a worker's HTTP address)."""

    def __init__(self, url, token=None, timeout=30):
        self.base = url.rstrip("/") + "/api/v1"
        self.token = token
        self.timeout = timeout

    def _request(self, method, path, body=None, timeout=None, headers=None):
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
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                message = json.loads(raw).get("error", raw.decode(errors="replace"))
            except (ValueError, AttributeError):
                message = raw.decode(errors="replace")
            raise APIError(e.code, message) from None

    def _call(self, method, path, body=None, headers=None):
        with self._request(method, path, body, headers=headers) as resp:
            return json.loads(resp.read() or b"null")

    def submit(self, job_type, params=None, key=None, tries=5, **options):
        """Submits a job; returns its id. A type no worker has, or bad params, raise APIError (400).
        options are the API's other fields (after, retries, priority, output_format...);
        output_format is how a keyed job stores its output blobs: "tsv", "jsonl", "tsv.zst" or
        "jsonl.zst" (default TSV for text keys, JSON lines otherwise). output() reads any of them.

        The submit carries an Idempotency-Key (key, or a new UUID), so it is retried on a 5xx, a
        timeout or a dropped connection, up to tries times, without ever making a second job: the
        cluster answers every repeat of a key within a day with the first job's id."""
        key = key or str(uuid.uuid4())
        body = {"type": job_type, "params": params if params is not None else {}}
        body.update(options)
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
        """The job's status."""
        return self._call("GET", f"/jobs/{urllib.parse.quote(job_id)}")

    def list(self, **query):
        """Jobs, newest first; query takes the API's filters (state, type, limit...)."""
        q = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        got = self._call("GET", "/jobs" + ("?" + q if q else ""))
        return got.get("jobs", got) if isinstance(got, dict) else got

    def result(self, job_id):
        """A succeeded job's result (for a keyed job, its output manifest)."""
        return self._call("GET", f"/jobs/{urllib.parse.quote(job_id)}/result")

    def cancel(self, job_id):
        return self._call("POST", f"/jobs/{urllib.parse.quote(job_id)}/cancel")

    def output(self, job_id, partition=None):
        """Yields (key, value) for each output record of a succeeded keyed job (a program job's
        too), in partition order, keys sorted within a partition; values are decoded JSON."""
        q = {"format": "jsonl"}
        if partition is not None:
            q["partition"] = str(partition)
        path = f"/jobs/{urllib.parse.quote(job_id)}/output?" + urllib.parse.urlencode(q)
        with self._request("GET", path, timeout=3600) as resp:
            for line in resp:
                if line.strip():
                    rec = json.loads(line)
                    yield rec["key"], rec["value"]

    def output_text(self, job_id, out, fmt="tsv"):
        """Copies the output records to the binary stream out, as tsv (key<TAB>value) or jsonl."""
        path = f"/jobs/{urllib.parse.quote(job_id)}/output?format={fmt}"
        with self._request("GET", path, timeout=3600) as resp:
            while True:
                b = resp.read(1 << 16)
                if not b:
                    return
                out.write(b)

    def wait(self, job_id, every=0.5, timeout=None, progress=None):
        """Polls until the job ends; returns its last status. A worker restarting or a leader
        changing is waited out; a missing job raises APIError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                job = self.job(job_id)
            except (APIError, OSError) as e:
                if isinstance(e, APIError) and e.status in (400, 404):
                    raise
                job = None
            if job is not None:
                if progress:
                    progress(job)
                if job["state"] in FINAL:
                    return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} did not finish within {timeout} s")
            time.sleep(every)

    def run(self, job_type, params=None, timeout=None, **options):
        """Submits a job and waits for it; returns its status, or raises JobFailed."""
        job = self.wait(self.submit(job_type, params, **options), timeout=timeout)
        if job["state"] != "succeeded":
            raise JobFailed(job)
        return job
