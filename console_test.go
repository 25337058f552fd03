package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
)

// syncBuffer is a bytes.Buffer that a command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDev runs seckill dev on addr and dir until ctx is cancelled, and returns what it prints;
// the test waits for it to stop and fails if it exits with an error.
func startDev(t *testing.T, ctx context.Context, addr, dir string) *syncBuffer {
	t.Helper()
	out := &syncBuffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if code := run(ctx, []string{"dev", "--addr", addr, "--data-dir", dir}, out, out); code != 0 {
			t.Errorf("dev exited %d:\n%s", code, out.String())
		}
	}()
	t.Cleanup(func() { <-done })
	return out
}

// chromium finds Debian's Chromium, or fails the test saying how to get it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("no Chromium to drive: install Debian's chromium package (apt-get install chromium; deploy/local/services.sh up does)")
	return ""
}

// TestConsoleInBrowser opens the console of a running seckill dev in Chromium by the URL it
// prints, watches a sale happen there, closes the campaign from the page, and checks that the
// API agrees. It saves a screenshot in the test's artifact directory.
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	base := "http://" + addr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := startDev(t, ctx, addr, dir)
	printed := regexp.MustCompile(`console: (http://\S+/console#token=(\S+))`)
	var url, token string
	eventually(t, 60*time.Second, "seckill dev prints the console's address", func() bool {
		if m := printed.FindStringSubmatch(out.String()); m != nil {
			url, token = m[1], m[2]
		}
		return url != ""
	})

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(filepath.Join(dir, "chromium")), chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true))
	actx, stopAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer stopAlloc()
	bctx, stopBrowser := chromedp.NewContext(actx)
	defer stopBrowser()
	bctx, stopTimeout := context.WithTimeout(bctx, 2*time.Minute)
	defer stopTimeout()
	browse := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	waitFor := func(what, js string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			t.Fatalf("wait until %s: %v", what, err)
		}
	}
	// api calls the API as an admin, or as user when one is named, and decodes the answer into out.
	api := func(method, path, user, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if user != "" {
			req.Header.Set("X-User-ID", user)
		} else {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
		}
		return resp.StatusCode
	}

	browse("open the printed address", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#app")))
	href, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(href, token) {
		t.Errorf("the token stayed in the address bar: %s", href)
	}
	waitFor("the stream is live", `document.querySelector("#conn").textContent === "live"`)

	if code := api("POST", "/v1/campaigns", "", `{"id":"browser","name":"Browser sale","stock":20,"per_user_limit":2}`, nil); code != http.StatusCreated {
		t.Fatalf("create the campaign: %d", code)
	}
	row := `document.querySelector('tr[data-campaign="browser"]')`
	waitFor("the campaign appears", row+` !== null`)
	// Another tab has no token (sessionStorage is the tab's), only a link cut short in the
	// middle of an escape: it shows the sign-in box, no sale, and signs in from the box.
	tab, closeTab := chromedp.NewContext(bctx)
	if err := chromedp.Do(tab, chromedp.Navigate(base+"/console#token=%E0%A4%A"), chromedp.WaitVisible(chromedp.CSS("#signin"))); err != nil {
		t.Fatalf("open the console in another tab: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // a snapshot would have come by now
	if bare, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.querySelector("#app").classList.contains("hidden") && `+
		`document.querySelector("#campaigns tbody").childElementCount === 0 && document.querySelector("#conn").textContent.includes("not a token")`)); err != nil || !bare {
		t.Errorf("without the token the page shows more than its sign-in box, or does not say the link's token is none (%v)", err)
	}
	if err := chromedp.Do(tab, chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS(`#signin-form button[type="submit"]`))); err != nil {
		t.Fatalf("sign in from the box: %v", err)
	}
	if _, err := chromedp.Run(tab, chromedp.Poll[bool](row+` !== null`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Errorf("the sale after signing in from the box, the link cut short before: %v", err)
	}
	closeTab()
	browse("remember its close button", chromedp.Evaluate[chromedp.Void](`window.closeButton = `+row+`.querySelector('button[data-action="close"]')`))
	for _, buyer := range []string{"ann", "bob", "cid"} {
		if code := api("POST", "/v1/campaigns/browser/purchases", buyer, `{"quantity":2}`, nil); code != http.StatusAccepted {
			t.Fatalf("%s's purchase: %d", buyer, code)
		}
	}
	waitFor("remaining falls to 14", row+`.querySelector("td.remaining").dataset.value === "14"`)
	waitFor("the purchases chart moves", `Number(document.querySelector("#chart-purchases").dataset.max) > 0`)
	waitFor("the orders are confirmed", row+`.querySelector("td.confirmed").dataset.value === "6"`)
	// A snapshot that rebuilt the row would replace the button under a click in progress, and
	// the click would be lost.
	if same, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.closeButton.isConnected && `+
		row+`.querySelector('button[data-action="close"]') === window.closeButton`)); err != nil || !same {
		t.Errorf("the campaign's close button is another element after a few snapshots (%v)", err)
	}

	create := func(what string, fields ...string) { // fields: name, value pairs of the form's inputs
		t.Helper()
		var steps []chromedp.Action[chromedp.Void]
		for i := 0; i < len(fields); i += 2 {
			steps = append(steps, chromedp.SendKeys(chromedp.CSS(`#create-form input[name="`+fields[i]+`"]`), fields[i+1]))
		}
		browse(what, append(steps, chromedp.Click(chromedp.CSS(`#create-form button[type="submit"]`)))...)
	}
	create("create a campaign from the page", "id", "from-page", "name", "Made in the console", "stock", "7", "per_user_limit", "1")
	waitFor("the page's campaign appears", `document.querySelector('tr[data-campaign="from-page"] td.stock')?.dataset.value === "7"`)
	create("create it again", "id", "from-page", "name", "Twice", "stock", "1", "per_user_limit", "1")
	waitFor("the page shows the API's error", `document.querySelector("#status").className === "error"`)
	if status, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#status"))); err != nil || !strings.Contains(status, "exists already") {
		t.Errorf("the page says %q after creating a campaign twice, want the API's message (%v)", status, err)
	}

	// A number of minutes the page's Date cannot hold (the input takes 1e300) is refused on
	// the page, saying so: toISOString threw out of the submit handler, with nothing shown.
	browse("clear the create form", chromedp.Evaluate[chromedp.Void](`document.querySelector("#create-form").reset(); document.querySelector("#status").textContent = ""`))
	create("create a campaign ending past any date", "id", "far", "name", "Far", "stock", "1", "per_user_limit", "1", "minutes", "1e300")
	waitFor("the page says the date is past naming", `document.querySelector("#status").className === "error" && document.querySelector("#status").textContent.includes("past the last date")`)

	// An answer to the Extend or Add stock prompt that is not a number (Number gives NaN) is
	// refused on the page, saying so: not thrown by Date out of the click handler, with nothing
	// shown, nor sent as {"add": null}, which the API refuses for a reason the operator never gave.
	for _, action := range []string{"extend", "add stock"} {
		browse("answer "+action+"'s prompt with words", chromedp.Evaluate[chromedp.Void](`window.prompt = () => "30 minutes"; document.querySelector("#status").textContent = ""`),
			chromedp.Click(chromedp.CSS(`tr[data-campaign="browser"] button[data-action="`+action+`"]`)))
		waitFor(action+" says the answer is no number", `document.querySelector("#status").className === "error" && document.querySelector("#status").textContent.includes("not a whole number")`)
	}

	// A campaign's name is anyone's text to the page: shown as text, never parsed as HTML.
	const markup = `<img src=x onerror="document.title='xss'"><b>bold</b>`
	name, _ := json.Marshal(markup)
	body := `{"id": "markup", "name": ` + string(name) + `, "stock": 1, "per_user_limit": 1}`
	if code := api("POST", "/v1/campaigns", "", body, nil); code != http.StatusCreated {
		t.Fatalf("create the campaign named with markup: %d", code)
	}
	waitFor("the campaign named with markup appears", `document.querySelector('tr[data-campaign="markup"]') !== null`)
	if shown, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => { const tr = document.querySelector('tr[data-campaign="markup"]');
		return tr.children[1].textContent === `+string(name)+` && tr.querySelector("img, b") === null && document.title !== "xss"; })()`)); err != nil || !shown {
		t.Errorf("a campaign's name with markup is not shown as its text (%v)", err)
	}

	// A buyer's user id (X-User-ID here, a JWT's sub in production) may hold markup too: the
	// order the console looks up shows it as text.
	const buyer = `<b id="buyer">eve</b>`
	var placed struct {
		OrderID string `json:"order_id"`
	}
	if code := api("POST", "/v1/campaigns/markup/purchases", buyer, `{"quantity":1}`, &placed); code != http.StatusAccepted {
		t.Fatalf("the purchase of the buyer named with markup: %d", code)
	}
	browse("look up the order of the buyer named with markup", chromedp.SendKeys(chromedp.CSS(`#order-form input[name="id"]`), placed.OrderID),
		chromedp.Click(chromedp.CSS(`#order-form button[type="submit"]`)))
	waitFor("the order shows", `document.querySelector("#order").textContent.includes("eve")`)
	if shown, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.querySelector("#order").textContent.includes('"user_id": "<b id=\\"buyer\\">eve</b>"') && `+
		`document.querySelector("#buyer") === null`)); err != nil || !shown {
		t.Errorf("a user id with markup is not shown as its text in the order (%v)", err)
	}

	// A dead letter's reason is what the record's writer put there: anyone who can write to the
	// dead-letter topic writes it. The console lists it as text. (A poison letter's reason,
	// which quotes the event's fields, is listed as "poison".)
	devAddrs, err := readDevAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	kafka, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(devAddrs.KafkaBrokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer kafka.Close()
	const reason = `<img src=x onerror="document.title='xss-dlq'">`
	letter := &kgo.Record{Topic: events.NewTopics(events.DefaultPrefix).DLQ, Value: []byte("{}"),
		Headers: []kgo.RecordHeader{{Key: events.HeaderReason, Value: []byte(reason)}}}
	if err := kafka.ProduceSync(bctx, letter).FirstErr(); err != nil {
		t.Fatalf("produce a dead letter: %v", err)
	}
	waitFor("its dead letter is listed", `[...document.querySelectorAll("#dead-letters tr")].some((tr) => (tr.dataset.key || "").startsWith("<img"))`)
	if shown, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`[...document.querySelectorAll("#dead-letters tr")].some((tr) => tr.children[0].textContent.startsWith("<img src=x")) && `+
		`document.querySelector("#dead-letters img") === null && document.title !== "xss-dlq"`)); err != nil || !shown {
		t.Errorf("a dead letter's reason with markup is not listed as its text (%v)", err)
	}

	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("take a screenshot: %v", err)
	}
	path := filepath.Join(t.ArtifactDir(), "console.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the live sale: %s", path)

	browse("close the campaign from the page", chromedp.Click(chromedp.CSS(`tr[data-campaign="browser"] button[data-action="close"]`)))
	waitFor("the page shows it ended", row+`.dataset.state === "ended"`)
	if code := api("POST", "/v1/campaigns/browser/purchases", "dan", `{"quantity":1}`, nil); code != http.StatusConflict {
		t.Errorf("a purchase after the close from the page: %d, want 409 ended", code)
	}
	var campaign struct {
		State  string    `json:"state"`
		EndsAt time.Time `json:"ends_at"`
	}
	if code := api("GET", "/v1/campaigns/browser", "", "", &campaign); code != http.StatusOK || campaign.State != "ended" || campaign.EndsAt.After(time.Now()) {
		t.Errorf("the API after the close from the page: %d %+v, want ended by now", code, campaign)
	}
	status, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#status")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status, "close done") {
		t.Errorf("the page says %q after the close", status)
	}
}

// consolePage serves the console's page as the api does (its files, its policy), beside the
// admin endpoints a test writes, and opens it in Chromium signed in with the token "t": how the
// page answers what those endpoints say, without a sale behind them.
func consolePage(t *testing.T, routes map[string]http.HandlerFunc) context.Context {
	t.Helper()
	exe := chromium(t)
	mux := http.NewServeMux()
	for _, f := range []struct{ path, file, ct string }{
		{"GET /console", "index.html", "text/html; charset=UTF-8"},
		{"GET /console/console.js", "console.js", "application/javascript; charset=UTF-8"},
		{"GET /console/console.css", "console.css", "text/css; charset=utf-8"},
	} {
		b, err := os.ReadFile(filepath.Join("api", "console", f.file))
		if err != nil {
			t.Fatal(err)
		}
		mux.HandleFunc(f.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", f.ct)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
			w.Write(b)
		})
	}
	for pattern, h := range routes {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer t" {
				http.Error(w, `{"error":{"code":"unauthorized","message":"no"}}`, http.StatusUnauthorized)
				return
			}
			h(w, r)
		})
	}
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium")),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true))
	actx, stopAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(stopAlloc)
	bctx, stopBrowser := chromedp.NewContext(actx)
	t.Cleanup(stopBrowser)
	bctx, stopTimeout := context.WithTimeout(bctx, time.Minute)
	t.Cleanup(stopTimeout)
	if err := chromedp.Do(bctx, chromedp.Navigate(web.URL+"/console#token=t"), chromedp.WaitVisible(chromedp.CSS("#app"))); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	return bctx
}

// snapshotStream answers the console's stream with snap every period until the page leaves.
func snapshotStream(snap string, period time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for {
			if _, err := io.WriteString(w, "event: snapshot\ndata: "+snap+"\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(period):
			}
		}
	}
}

// pageText is the text of the page's element sel.
func pageText(t *testing.T, bctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(sel)+`).textContent`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pageWait waits until js is true on the page.
func pageWait(t *testing.T, bctx context.Context, what, js string) {
	t.Helper()
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("wait until %s: %v", what, err)
	}
}

const pageCampaign = `{"id":"c1","name":"C1","state":"on_sale","stock":10,"remaining":5,"pending":1,"confirmed":4,"paid":0,"refunded":0,"per_user_limit":1}`

// TestConsoleKeepsAControlsAnswer: the answer of a control stays on the page while the
// snapshots say a source cannot be read (an incident, when controls are used). Both shared one
// line, and the next snapshot, a second later, put its errors over the answer.
func TestConsoleKeepsAControlsAnswer(t *testing.T) {
	bctx := consolePage(t, map[string]http.HandlerFunc{
		"GET /v1/admin/console/events": snapshotStream(`{"at":"2026-11-28T00:00:00Z","campaigns":[`+pageCampaign+`],"consumer_lag":-1,"persisted_per_sec":-1,`+
			`"errors":["consumer lag: cannot be read right now"]}`, 200*time.Millisecond),
		"POST /v1/admin/campaigns/c1/close": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, strings.Replace(pageCampaign, "on_sale", "ended", 1))
		},
	})
	pageWait(t, bctx, "the campaign shows", `document.querySelector('tr[data-campaign="c1"] button[data-action="close"]') !== null`)
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`tr[data-campaign="c1"] button[data-action="close"]`))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // several snapshots with errors
	if page := pageText(t, bctx, "main"); !strings.Contains(page, "c1: close done") || !strings.Contains(page, "consumer lag: cannot be read right now") {
		t.Errorf("1.5 s after the close, the page shows %q: want the close's answer and the figures missing", pageText(t, bctx, "#status"))
	}
}

// TestConsoleMarksStaleRows: while the store cannot be read, the snapshots carry the rows last
// read and since when (campaigns_as_of); the page greys them and says how old they are, and
// takes the mark off with the first fresh snapshot.
func TestConsoleMarksStaleRows(t *testing.T) {
	const fresh = `{"at":"2026-11-28T00:00:10Z","campaigns":[` + pageCampaign + `],"consumer_lag":0,"persisted_per_sec":0}`
	const stale = `{"at":"2026-11-28T00:00:05Z","campaigns":[` + pageCampaign + `],"campaigns_as_of":"2026-11-28T00:00:00Z",` +
		`"consumer_lag":0,"persisted_per_sec":0,"errors":["campaigns: the store cannot be read right now"]}`
	back := make(chan struct{}) // the store answers again
	bctx := consolePage(t, map[string]http.HandlerFunc{
		"GET /v1/admin/console/events": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, snap := range []string{stale, fresh} {
				io.WriteString(w, "event: snapshot\ndata: "+snap+"\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-back:
				}
			}
		},
	})
	pageWait(t, bctx, "the rows show, marked stale", `document.querySelector('#campaigns').classList.contains('stale') && document.querySelector('tr[data-campaign="c1"]') !== null`)
	if said := pageText(t, bctx, "#campaigns-as-of"); !strings.HasPrefix(said, "stale: as of ") {
		t.Errorf("the table's title says %q beside stale rows, want \"stale: as of …\"", said)
	}
	close(back)
	pageWait(t, bctx, "the mark goes with a fresh snapshot", `!document.querySelector('#campaigns').classList.contains('stale') && document.querySelector('#campaigns-as-of').textContent === ""`)
}

// TestConsoleSaysWhatAControlDid: the page tells a control that was refused from one that was
// done but not shown, and from one whose answer never came. It said "failed" of all three; an
// operator told an add "failed" sends it again, and it adds again.
func TestConsoleSaysWhatAControlDid(t *testing.T) {
	apiError := func(status int, code, message string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": message}})
		}
	}
	const unshown = `campaign "c1" was changed, but cannot be shown right now: GET it shortly`
	bctx := consolePage(t, map[string]http.HandlerFunc{
		"GET /v1/admin/console/events":       snapshotStream(`{"at":"2026-11-28T00:00:00Z","campaigns":[`+pageCampaign+`]}`, 500*time.Millisecond),
		"POST /v1/admin/campaigns/c1/stock":  apiError(http.StatusServiceUnavailable, "unavailable", unshown),
		"POST /v1/admin/campaigns/c1/close":  apiError(http.StatusConflict, "campaign_cancelled", `campaign "c1" is cancelled`),
		"POST /v1/admin/campaigns/c1/extend": func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }, // the answer is lost
	})
	pageWait(t, bctx, "the campaign shows", `document.querySelector('tr[data-campaign="c1"] button[data-action="close"]') !== null`)
	for _, tc := range []struct {
		action    string
		want, not string
	}{
		{"add stock", unshown, "failed"},
		{"extend", "may have been done", "failed"},
		{"close", `close failed: campaign "c1" is cancelled`, ""},
	} {
		if err := chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](`window.prompt = () => "5"; document.querySelector("#status").textContent = ""`),
			chromedp.Click(chromedp.CSS(`tr[data-campaign="c1"] button[data-action="`+tc.action+`"]`))); err != nil {
			t.Fatal(err)
		}
		pageWait(t, bctx, tc.action+" answers", `!["", "c1: `+strings.Replace(tc.action, "add ", "", 1)+`…"].includes(document.querySelector("#status").textContent)`)
		if said := pageText(t, bctx, "#status"); !strings.Contains(said, tc.want) || tc.not != "" && strings.Contains(said, tc.not) {
			t.Errorf("%s: the page says %q; want %q in it and no %q", tc.action, said, tc.want, tc.not)
		}
	}
}

// TestConsoleBacksOffAStreamThatEnds: a stream that ends as soon as it opens (an api draining
// answers 200 and ends it at once) is opened again later and later. The page waited its first
// half second each time, as the open had succeeded: two opens a second for as long as the page
// stayed open, each one of an api with no page a new snapshot loop, Kafka client and read of
// the whole dead-letter topic.
func TestConsoleBacksOffAStreamThatEnds(t *testing.T) {
	var opens atomic.Int64
	bctx := consolePage(t, map[string]http.HandlerFunc{
		"GET /v1/admin/console/events": func(w http.ResponseWriter, r *http.Request) {
			opens.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "retry: 2000\n\n")
		},
	})
	start := opens.Load()
	time.Sleep(5 * time.Second)
	if n := opens.Load() - start; n > 5 { // 0.5 + 1 + 2 s, then 4 s: 3 or 4 with a backoff
		t.Errorf("the page opened a stream that ends at once %d times in 5 s", n)
	}
	pageWait(t, bctx, "the page says it reconnects", `document.querySelector("#conn").textContent.startsWith("reconnecting")`)
}

// TestConsoleSaysWhyTheStreamIsDown: a stream the api refuses shows the api's reason beside
// "reconnecting"; the page threw it away and showed "reconnecting…" alone, on an empty page.
func TestConsoleSaysWhyTheStreamIsDown(t *testing.T) {
	bctx := consolePage(t, map[string]http.HandlerFunc{
		"GET /v1/admin/console/events": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"code":"unavailable","message":"the api is stopping"}}`)
		},
	})
	pageWait(t, bctx, "the page says it reconnects", `document.querySelector("#conn").textContent.startsWith("reconnecting")`)
	if said := pageText(t, bctx, "#conn"); !strings.Contains(said, "the api is stopping") {
		t.Errorf("the stream refused with 503 \"the api is stopping\": the page says %q", said)
	}
}

// TestConsoleDrawsAnUnknownLagAsUnknown: a snapshot whose lag Kafka did not answer (-1) leaves
// a gap in the consumer chart. The page drew it as 0: the line fell to "no lag" in the very
// outage that makes the lag grow.
func TestConsoleDrawsAnUnknownLagAsUnknown(t *testing.T) {
	bctx := consolePage(t, map[string]http.HandlerFunc{
		"GET /v1/admin/console/events": snapshotStream(`{"at":"2026-11-28T00:00:00Z","campaigns":[],"consumer_lag":-1,"persisted_per_sec":-1,`+
			`"errors":["consumer lag: cannot be read right now"]}`, 200*time.Millisecond),
	})
	pageWait(t, bctx, "a snapshot is drawn", `document.querySelector("#chart-consumer").dataset.last !== undefined`)
	last, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("#chart-consumer").dataset.last`))
	if err != nil {
		t.Fatal(err)
	}
	if last != "unknown,unknown" {
		t.Errorf("the consumer chart's last points, of a lag and a rate Kafka did not answer: %q, want unknown,unknown", last)
	}
}

// TestConsoleReconnectsAStreamGoneSilent: a stream that stays open but carries no snapshot (the
// api's host gone without a reset, a partition, a proxy holding the stream) is given up and
// opened again. The page waited on it for ever, showing "live" over the figures of its last
// snapshot, in the very incident the operator watches it for.
func TestConsoleReconnectsAStreamGoneSilent(t *testing.T) {
	var opens atomic.Int64
	bctx := consolePage(t, map[string]http.HandlerFunc{
		"GET /v1/admin/console/events": func(w http.ResponseWriter, r *http.Request) {
			opens.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: snapshot\ndata: {\"at\":\"2026-11-28T00:00:00Z\",\"campaigns\":["+pageCampaign+"]}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // then silence
		},
	})
	pageWait(t, bctx, "the snapshot shows", `document.querySelector('tr[data-campaign="c1"]') !== null`)
	deadline := time.Now().Add(20 * time.Second)
	for opens.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if opens.Load() < 2 {
		t.Errorf("20 s after its last snapshot, the page still waits on the silent stream, saying %q", pageText(t, bctx, "#conn"))
	}
}

// TestConsoleShowsErrorsAsText backs the page's escaping of what the api words from others'
// text: a snapshot's errors (they name campaigns and dependencies), a control's refusal, an
// order's reason and a lookup's error are shown as text, never parsed as HTML (the page builds
// every element with textContent; innerHTML on any of them fails this test).
func TestConsoleShowsErrorsAsText(t *testing.T) {
	const markup = `<img src=x onerror="document.title='xss'">`
	quoted, _ := json.Marshal(markup)
	refuse := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":"order_not_found","message":`+string(quoted)+`}}`)
	}
	bctx := consolePage(t, map[string]http.HandlerFunc{
		"GET /v1/admin/console/events": snapshotStream(`{"at":"2026-11-28T00:00:00Z","campaigns":[`+pageCampaign+`],"dead_letters":{`+string(quoted)+`:1},`+
			`"errors":[`+string(quoted)+`]}`, 300*time.Millisecond),
		"POST /v1/admin/campaigns/c1/close": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"campaign_cancelled","message":`+string(quoted)+`}}`)
		},
		"GET /v1/admin/orders/o1": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"order_id":"o1","user_id":`+string(quoted)+`,"status":"failed","reason":`+string(quoted)+`}`)
		},
		"GET /v1/admin/orders/o2": refuse,
	})
	pageWait(t, bctx, "the campaign shows", `document.querySelector('tr[data-campaign="c1"] button[data-action="close"]') !== null`)
	if err := chromedp.Do(bctx, chromedp.Click(chromedp.CSS(`tr[data-campaign="c1"] button[data-action="close"]`))); err != nil {
		t.Fatal(err)
	}
	pageWait(t, bctx, "the close's refusal shows", `document.querySelector("#status").textContent.includes("<img")`)
	for _, id := range []string{"o1", "o2"} {
		if err := chromedp.Do(bctx, chromedp.SetValue(chromedp.CSS(`#order-form input[name="id"]`), id),
			chromedp.Click(chromedp.CSS(`#order-form button[type="submit"]`))); err != nil {
			t.Fatal(err)
		}
		pageWait(t, bctx, "order "+id+" shows", `document.querySelector("#order").textContent.includes("<img")`+
			` && document.querySelector("#order").textContent.includes(`+strconv.Quote(map[string]string{"o1": `"status"`, "o2": "<img"}[id])+`)`)
	}
	for _, sel := range []string{"#missing", "#status", "#order", "#dead-letters"} {
		if !strings.Contains(pageText(t, bctx, sel), "<img src=x") {
			t.Errorf("%s does not show the markup as its text: %q", sel, pageText(t, bctx, sel))
		}
	}
	if parsed, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.querySelector("main img") !== null || document.title === "xss"`)); err != nil || parsed {
		t.Errorf("markup from the api was parsed as HTML (%v)", err)
	}
}

// TestConsoleShowsAControlUnderWay: while a control runs (up to 5 s when a dependency is slow)
// the page says so. It went on showing the answer of the control before: an add of stock sent
// again read "c1: stock done" with the first add's figures until the second one answered.
func TestConsoleShowsAControlUnderWay(t *testing.T) {
	var adds atomic.Int64
	bctx := consolePage(t, map[string]http.HandlerFunc{
		"GET /v1/admin/console/events": snapshotStream(`{"at":"2026-11-28T00:00:00Z","campaigns":[`+pageCampaign+`]}`, 500*time.Millisecond),
		"POST /v1/admin/campaigns/c1/stock": func(w http.ResponseWriter, r *http.Request) {
			n := adds.Add(1)
			if n > 1 {
				time.Sleep(3 * time.Second) // a slow store
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, strings.Replace(pageCampaign, `"remaining":5`, `"remaining":`+strconv.FormatInt(5+5*n, 10), 1))
		},
	})
	pageWait(t, bctx, "the campaign shows", `document.querySelector('tr[data-campaign="c1"] button[data-action="add stock"]') !== null`)
	add := func() {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](`window.prompt = () => "5"`),
			chromedp.Click(chromedp.CSS(`tr[data-campaign="c1"] button[data-action="add stock"]`))); err != nil {
			t.Fatal(err)
		}
	}
	add()
	pageWait(t, bctx, "the first add answers", `document.querySelector("#status").textContent.includes("done")`)
	add()
	time.Sleep(time.Second)
	if said := pageText(t, bctx, "#status"); strings.Contains(said, "done") || !strings.Contains(said, "…") {
		t.Errorf("a second into the second add, the page says %q: want it under way, not the first one's answer", said)
	}
	pageWait(t, bctx, "the second add answers", `document.querySelector("#status").textContent.includes("15 of 10")`)
}
