"""The package's client against a running cluster: skipped unless MAPAGG_URL names one.

`make test` runs these from a Go test (e2e/programs_test.go) that starts a real cluster with
the example programs registered; MAPAGG_TEST_CONTAINER holds a corpus and MAPAGG_TEST_TYPE
and MAPAGG_TEST_RAISER name a word count and a mapper that raises on "poison".
"""

import collections
import os
import unittest

import mapagg

URL = os.environ.get("MAPAGG_URL")


@unittest.skipUnless(URL, "MAPAGG_URL is not set: no cluster to test against")
class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        token = None
        if os.environ.get("MAPAGG_TOKEN_FILE"):
            with open(os.environ["MAPAGG_TOKEN_FILE"]) as f:
                token = f.read().strip()
        cls.c = mapagg.Client(URL, token)
        cls.container = os.environ.get("MAPAGG_TEST_CONTAINER", "corpus")
        cls.type = os.environ.get("MAPAGG_TEST_TYPE", "pywordcount")

    def test_cluster_wordcount(self):
        job = self.c.run(self.type, {"container": self.container, "shard_bytes": 40000}, timeout=300)
        self.assertEqual(job["state"], "succeeded")
        out = dict(self.c.output(job["id"]))
        self.assertGreater(len(out), 100)
        self.assertTrue(all(isinstance(v, int) and v > 0 for v in out.values()))
        # The same job listed, and its TSV output equal to the typed one.
        ids = [j["id"] for j in self.c.list(limit=50)]
        self.assertIn(job["id"], ids)
        import io

        buf = io.BytesIO()
        self.c.output_text(job["id"], buf)
        tsv = collections.OrderedDict(mapagg.unescape(l).split("\t", 1) for l in buf.getvalue().decode().splitlines())
        self.assertEqual({k: int(v) for k, v in tsv.items()}, out)

    def test_unknown_type_refused(self):
        with self.assertRaises(mapagg.APIError) as e:
            self.c.submit("pynosuchprogram", {"container": self.container})
        self.assertEqual(e.exception.status, 400)
        self.assertIn("pynosuchprogram", e.exception.message)

    def test_raising_mapper_fails_naming_the_exception(self):
        raiser = os.environ.get("MAPAGG_TEST_RAISER")
        if not raiser:
            self.skipTest("MAPAGG_TEST_RAISER is not set")
        with self.assertRaises(mapagg.JobFailed) as e:
            self.c.run(raiser, {"container": "poison"}, timeout=300)
        self.assertIn("ValueError: poison record seen", e.exception.job["error"])

    def test_cancel(self):
        job_id = self.c.submit(self.type, {"container": self.container, "shard_bytes": 4096})
        self.c.cancel(job_id)
        job = self.c.wait(job_id, timeout=120)
        self.assertIn(job["state"], ("cancelled", "succeeded"))


if __name__ == "__main__":
    unittest.main()
