package userjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A Map may read its range for as long as it takes: nothing bounds it by a deadline over the
// whole body. The storage client's time per try (15 s) ends a body being read, so every read
// resumes from the offset reached (store.ReadRange).
//
// The cheap case: the workers reach storage through a proxy that ends every body of the slow
// blob after 64 KiB, as the time per try ends one mid-way; slow-lines reads 256 KiB of lines,
// pausing after each (about 4 s), and must count every line exactly once.
func TestLongRead_BodiesCutMidwayResume(t *testing.T) {
	const size, cut = 256 << 10, 64 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	conn := testenv.Azurite(t)
	px, cuts := cuttingProxy(t, conn, "/slow/", cut)
	c, container, data := slowCluster(ctx, t, conn, px, size)
	got, took := runSlowLines(ctx, t, c, container, len(data), 4*time.Second)
	if want := TallyOf(data); got != want {
		t.Fatalf("slow-lines read %+v, want %+v", got, want)
	}
	if n := cuts.Load(); n < size/cut-1 {
		t.Fatalf("the proxy cut %d bodies, want at least %d: the test did not test resumption", n, size/cut-1)
	}
	t.Logf("read %d KiB of lines over %v through %d cut bodies", size>>10, took.Round(time.Millisecond), cuts.Load())
}

// The case, behind MAPAGG_LONGREAD=1 (make test-longread, about two minutes): a Map
// spends 60 s reading one 1 MiB range straight from Azurite, four times the storage client's
// time per try, and the job succeeds exactly.
func TestLongRead_SixtySecondMap(t *testing.T) {
	if os.Getenv("MAPAGG_LONGREAD") != "1" {
		t.Skip("a 60 s Map: set MAPAGG_LONGREAD=1 (make test-longread)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	conn := testenv.Azurite(t)
	c, container, data := slowCluster(ctx, t, conn, "", 1<<20)
	got, took := runSlowLines(ctx, t, c, container, len(data), 60*time.Second)
	if want := TallyOf(data); got != want {
		t.Fatalf("slow-lines read %+v, want %+v", got, want)
	}
	t.Logf("a Map read 1 MiB of lines over %v", took.Round(time.Millisecond))
}

// slowCluster writes a blob of size bytes of lines to the "slow/" prefix of a container and
// starts a cluster of the test worker (with its storage through proxy, if set).
func slowCluster(ctx context.Context, t *testing.T, conn, proxy string, size int) (*cluster.Cluster, string, []byte) {
	t.Helper()
	bc, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 0, size)
	for i := 0; ; i++ {
		line := fmt.Sprintf("line %07d of a blob a Map reads slowly\n", i)
		if len(data)+len(line) > size {
			break
		}
		data = append(data, line...)
	}
	container := testenv.Name(t, "slow")
	if err := store.New(bc, container).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := bc.UploadBuffer(ctx, container, "slow/data.txt", data, nil); err != nil {
		t.Fatal(err)
	}
	root, err := devserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, err := cluster.BuildPackage(dir, root, "./internal/harness/testworker", false)
	if err != nil {
		t.Fatal(err)
	}
	reg := builtin.Registry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	var env []string
	if proxy != "" {
		env = append(env, "AZURE_STORAGE_CONNECTION_STRING="+proxy)
	}
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, WorkerBin: bin, Workers: 2, Namespace: testenv.Name(t, "lr"),
		ConnStr: conn, NATSURL: testenv.NATS(t), Registry: reg, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c, container, data
}

// runSlowLines runs slow-lines over the slow blob in one shard, pausing so that reading it
// takes at least over, and returns its result and the job's makespan.
func runSlowLines(ctx context.Context, t *testing.T, c *cluster.Cluster, container string, size int, over time.Duration) (Tally, time.Duration) {
	t.Helper()
	lines := size / len("line 0000000 of a blob a Map reads slowly\n")
	delay := over/time.Duration(lines) + time.Microsecond
	params, _ := json.Marshal(map[string]any{"container": container, "prefix": "slow/",
		"shard_bytes": size, "line_delay": delay.String()})
	start := time.Now()
	id, err := c.Client.Submit(ctx, "slow-lines", params)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Client.Wait(ctx, id, 250*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	took := time.Since(start)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("job %s %s after %v: %s", id, st.State, took.Round(time.Millisecond), st.Error)
	}
	if took < over {
		t.Fatalf("job %s took %v, less than the %v its Map must spend reading", id, took, over)
	}
	var got Tally
	if err := json.Unmarshal(st.Result, &got); err != nil {
		t.Fatalf("result %s: %v", st.Result, err)
	}
	return got, took
}

// cuttingProxy serves the blob endpoint of conn through a reverse proxy that ends every GET body
// of a blob whose path holds match after cut bytes, as a connection that drops does. It returns
// conn with the proxy as its blob endpoint and a count of the bodies it cut.
func cuttingProxy(t *testing.T, conn, match string, cut int64) (string, *atomic.Int64) {
	t.Helper()
	m := regexp.MustCompile(`BlobEndpoint=(https?://[^/;]+)`).FindStringSubmatch(conn)
	if m == nil {
		t.Fatalf("no BlobEndpoint in the connection string")
	}
	target, err := url.Parse(m[1])
	if err != nil {
		t.Fatal(err)
	}
	var cuts atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodGet && strings.Contains(resp.Request.URL.Path, match) && resp.StatusCode/100 == 2 {
			resp.Body = &cutBody{ReadCloser: resp.Body, left: cut, cuts: &cuts}
		}
		return nil
	}
	srv := httptest.NewServer(rp) // listens on 127.0.0.1
	t.Cleanup(srv.Close)
	return strings.Replace(conn, m[1], srv.URL, 1), &cuts
}

var errCut = errors.New("connection cut by the test proxy")

// cutBody fails after left bytes.
type cutBody struct {
	io.ReadCloser
	left int64
	cuts *atomic.Int64
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.cuts.Add(1)
		return 0, errCut
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
