"""Client.submit's retry: a 5xx the real cluster cannot give on demand, so a local stand-in
server answers 503 first and then the job's id; both tries must carry one Idempotency-Key. The
stand-in also shows the body submit sends."""

import http.server
import json
import threading
import unittest

import mapagg


class _Flaky(http.server.BaseHTTPRequestHandler):
    keys = []
    bodies = []
    fail = 1

    def do_POST(self):
        _Flaky.bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))))
        _Flaky.keys.append(self.headers.get("Idempotency-Key"))
        if len(_Flaky.keys) <= _Flaky.fail:
            code, body = 503, {"error": "the leader is changing"}
        else:
            code, body = 200, {"id": "20261128-000000-abc"}
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


class SubmitRetryTest(unittest.TestCase):
    def setUp(self):
        _Flaky.keys = []
        _Flaky.bodies = []
        self.srv = http.server.HTTPServer(("127.0.0.1", 0), _Flaky)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.c = mapagg.Client(f"http://127.0.0.1:{self.srv.server_port}")

    def tearDown(self):
        self.srv.shutdown()
        self.srv.server_close()

    def test_5xx_retried_with_one_key(self):
        _Flaky.fail = 2
        self.assertEqual(self.c.submit("primes", {"to": 10}), "20261128-000000-abc")
        self.assertEqual(len(_Flaky.keys), 3)
        self.assertEqual(len(set(_Flaky.keys)), 1, _Flaky.keys)
        self.assertTrue(_Flaky.keys[0])

    def test_given_key_sent(self):
        _Flaky.fail = 0
        self.c.submit("primes", {"to": 10}, key="nightly-2026-11-28")
        self.assertEqual(_Flaky.keys, ["nightly-2026-11-28"])

    def test_output_format_sent(self):
        _Flaky.fail = 0
        self.c.submit("regroup", {"job": "20261128-000000-abc"}, output_format="jsonl.zst")
        self.c.submit("regroup", {"job": "20261128-000000-abc"})
        self.assertEqual(_Flaky.bodies[0].get("output_format"), "jsonl.zst")
        self.assertNotIn("output_format", _Flaky.bodies[1])

    def test_5xx_every_time_raises(self):
        _Flaky.fail = 99
        with self.assertRaises(mapagg.APIError) as cm:
            self.c.submit("primes", {"to": 10}, tries=2)
        self.assertEqual(cm.exception.status, 503)
        self.assertEqual(len(_Flaky.keys), 2)


if __name__ == "__main__":
    unittest.main()
