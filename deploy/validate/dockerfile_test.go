package validate

import (
	"bytes"
	"context"
	"go/version"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// finalBase is the runtime image: no shell, no package manager, user 65532.
const finalBase = "gcr.io/distroless/static-debian12:nonroot"

// instruction is one Dockerfile instruction, its keyword upper-cased.
type instruction struct {
	cmd   string
	flags []string
	args  []string
	node  *parser.Node
}

// stage is one FROM and the instructions under it.
type stage struct {
	base, name string
	ins        []instruction
}

// parseDockerfile splits a Dockerfile, as BuildKit parses it, into stages.
func parseDockerfile(src []byte) ([]stage, problems, error) {
	res, err := parser.Parse(bytes.NewReader(src))
	if err != nil {
		return nil, nil, err
	}
	var probs problems
	for _, w := range res.Warnings {
		probs.addf("Dockerfile: %s", w.Short)
	}
	var stages []stage
	for _, n := range res.AST.Children {
		in := instruction{cmd: strings.ToUpper(n.Value), flags: n.Flags, node: n}
		for a := n.Next; a != nil; a = a.Next {
			in.args = append(in.args, a.Value)
		}
		if in.cmd == "FROM" {
			s := stage{}
			if len(in.args) > 0 {
				s.base = in.args[0]
			}
			if len(in.args) == 3 && strings.EqualFold(in.args[1], "AS") {
				s.name = in.args[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				probs.addf("Dockerfile: %s before the first FROM", in.cmd)
			}
			continue
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	return stages, probs, nil
}

// checkDockerfile checks that the build is static and stripped, on a Go at least as new as
// goVersion (go.mod's go line), and that the final image runs /seckill as a non-root user
// from distroless.
func checkDockerfile(src []byte, goVersion string) problems {
	stages, probs, err := parseDockerfile(src)
	if err != nil {
		probs.addf("Dockerfile: %v", err)
		return probs
	}
	if len(stages) < 2 {
		probs.addf("Dockerfile: want a build stage and a final stage, found %d stage(s)", len(stages))
		return probs
	}

	final := stages[len(stages)-1]
	if final.base != finalBase {
		probs.addf("Dockerfile: final stage FROM %s, want %s", final.base, finalBase)
	}
	user := ""
	if strings.HasSuffix(final.base, ":nonroot") {
		user = "nonroot"
	}
	var entrypoint *instruction
	var exposed []string
	for i, in := range final.ins {
		switch in.cmd {
		case "USER":
			user = strings.Join(in.args, " ")
		case "ENTRYPOINT":
			entrypoint = &final.ins[i]
		case "EXPOSE":
			exposed = append(exposed, in.args...)
		case "RUN":
			probs.addf("Dockerfile: RUN in the final stage, which has no shell")
		}
	}
	if name, _, _ := strings.Cut(user, ":"); name == "" || name == "root" || name == "0" {
		probs.addf("Dockerfile: the final stage runs as %q, want a non-root user", user)
	}
	if entrypoint == nil || !entrypoint.node.Attributes["json"] || !slices.Equal(entrypoint.args, []string{"/seckill"}) {
		probs.addf(`Dockerfile: want ENTRYPOINT ["/seckill"] (exec form) in the final stage`)
	}
	for _, port := range []string{"8080", "9090"} {
		if !slices.Contains(exposed, port) {
			probs.addf("Dockerfile: final stage does not EXPOSE %s", port)
		}
	}

	build := stages[0]
	probs = append(probs, checkGoImage(build.base, goVersion)...)
	if build.name == "" || !slices.ContainsFunc(final.ins, func(in instruction) bool {
		return in.cmd == "COPY" && slices.Contains(in.flags, "--from="+build.name) && slices.Contains(in.args, "/seckill")
	}) {
		probs.addf("Dockerfile: the final stage must COPY /seckill --from the named build stage")
	}
	cgoOff, built := false, false
	for _, in := range build.ins {
		line := strings.Join(in.args, " ")
		switch in.cmd {
		case "ENV":
			// ENV nodes come as key, value, separator triples.
			for i := 0; i+1 < len(in.args); i += 3 {
				if in.args[i] == "CGO_ENABLED" && in.args[i+1] == "0" {
					cgoOff = true
				}
			}
		case "RUN":
			if strings.Contains(line, "CGO_ENABLED=0") {
				cgoOff = true
			}
			if strings.Contains(line, "go build") && strings.Contains(line, "/out/seckill") {
				built = true
				if !strings.Contains(line, "-trimpath") || !strings.Contains(line, `-ldflags "-s -w"`) {
					probs.addf(`Dockerfile: the seckill build must use -trimpath -ldflags "-s -w": %s`, line)
				}
			}
		}
	}
	if !cgoOff {
		probs.addf("Dockerfile: the build stage does not set CGO_ENABLED=0 (the final image has no libc)")
	}
	if !built {
		probs.addf("Dockerfile: no RUN go build ... -o /out/seckill in the build stage")
	}
	return probs
}

// checkGoImage checks the build stage's base against go.mod's go line. The official golang
// images set GOTOOLCHAIN=local, so one older than that line fails at `go mod download` ("go.mod
// requires go >= 1.26.8 (running go 1.26.3; GOTOOLCHAIN=local)"), and a tag without the patch
// (golang:1.26) is whichever patch release the builder pulled last: an old one cached on a build
// host breaks the build the day go.mod moves, and two hosts build with different compilers.
func checkGoImage(base, goVersion string) problems {
	var probs problems
	tag, ok := strings.CutPrefix(base, "golang:")
	tag, _, _ = strings.Cut(tag, "@")
	tag, _, _ = strings.Cut(tag, "-") // golang:1.26.8-bookworm
	switch {
	case !ok:
		probs.addf("Dockerfile: build stage FROM %s, want golang:%s (go.mod's go line)", base, goVersion)
	case strings.Count(tag, ".") != 2 || !version.IsValid("go"+tag):
		probs.addf("Dockerfile: build stage FROM %s names no patch release: whichever the builder pulled last builds it (GOTOOLCHAIN=local in the golang images); want golang:%s (go.mod's go line)", base, goVersion)
	case version.Compare("go"+tag, "go"+goVersion) < 0:
		probs.addf("Dockerfile: build stage FROM %s is older than go.mod's go %s: with GOTOOLCHAIN=local (the golang images') `go mod download` fails", base, goVersion)
	}
	return probs
}

// goLine matches go.mod's go directive.
var goLine = regexp.MustCompile(`(?m)^go ([0-9][^\s]*)\s*$`)

// modGoVersion returns the go line of the seckill module's go.mod.
func modGoVersion(tb testing.TB) string {
	tb.Helper()
	mod, err := os.ReadFile(filepath.Join(deployDir(tb), "..", "go.mod"))
	if err != nil {
		tb.Fatal(err)
	}
	m := goLine.FindSubmatch(mod)
	if m == nil {
		tb.Fatal("go.mod: no go line")
	}
	return string(m[1])
}

// finalFiles returns the paths the final stage copies in.
func finalFiles(src []byte) []string {
	stages, _, err := parseDockerfile(src)
	if err != nil || len(stages) == 0 {
		return nil
	}
	var out []string
	for _, in := range stages[len(stages)-1].ins {
		if in.cmd == "COPY" && len(in.args) > 0 {
			out = append(out, in.args[len(in.args)-1])
		}
	}
	return out
}

// heredoc returns the content of the COPY heredoc whose destination is dest.
func heredoc(src []byte, dest string) (string, bool) {
	stages, _, err := parseDockerfile(src)
	if err != nil {
		return "", false
	}
	for _, s := range stages {
		for _, in := range s.ins {
			if in.cmd == "COPY" && len(in.node.Heredocs) == 1 && slices.Contains(in.args, dest) {
				return in.node.Heredocs[0].Content, true
			}
		}
	}
	return "", false
}

// contextSecrets are paths of the build context that hold, or may hold, real secrets: the
// Secret the k8s README has operators fill in place, and the .env the deploy README suggests
// for compose's (found in deploy/, the compose file's directory, or beside the command).
var contextSecrets = []string{"deploy/k8s/secret.yaml", "deploy/k8s/infra/postgres-secret.yaml", "deploy/k8s/infra/redis-secret.yaml", "deploy/.env", ".env"}

// contextSources are paths the build needs.
var contextSources = []string{"go.mod", "go.sum", "main.go", "lua/reserve.lua", "api/openapi.yaml"}

// checkDockerignore checks that the build context (the repository root, `COPY . .` in the
// build stage) leaves out every file that may hold a real secret and keeps the sources. A
// build stage is not the final image, but its layers are: in the builder's cache, and in a
// registry wherever CI exports the cache (--cache-to …,mode=max), secrets and all.
func checkDockerignore(ignore string) problems {
	var probs problems
	var patterns []string
	for _, line := range strings.Split(ignore, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	for _, p := range contextSecrets {
		if !dockerIgnored(patterns, p) {
			probs.addf(".dockerignore: %s is in the build context, and its layer in every cache of the build stage: leave it out", p)
		}
	}
	for _, p := range contextSources {
		if dockerIgnored(patterns, p) {
			probs.addf(".dockerignore: leaves out %s, which the build needs", p)
		}
	}
	return probs
}

// dockerIgnored reports whether .dockerignore's patterns leave name out: the last pattern that
// matches it or one of its parent directories decides, and a leading ! keeps it. Enough of
// Docker's rules (path.Match, a leading **/ for any depth) for the patterns used here.
func dockerIgnored(patterns []string, name string) bool {
	ignored := false
	for _, p := range patterns {
		keep := strings.HasPrefix(p, "!")
		p = strings.Trim(strings.TrimPrefix(p, "!"), "/")
		for dir := name; dir != "."; dir = path.Dir(dir) {
			m, _ := path.Match(p, dir)
			if rest, ok := strings.CutPrefix(p, "**/"); ok {
				for sub := dir; !m; {
					m, _ = path.Match(rest, sub)
					i := strings.Index(sub, "/")
					if i < 0 {
						break
					}
					sub = sub[i+1:]
				}
			}
			if m {
				ignored = !keep
				break
			}
		}
	}
	return ignored
}

func TestDockerignore(t *testing.T) {
	ignore, err := os.ReadFile(filepath.Join(deployDir(t), "..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	checkDockerignore(string(ignore)).report(t)
}

func TestDockerfile(t *testing.T) {
	checkDockerfile(readDeployFile(t, "Dockerfile"), modGoVersion(t)).report(t)
}

// TestDockerfileHealthcheckProbe vets the probe program the Dockerfile builds for
// compose's healthchecks, and checks that every compose healthcheck of a seckill
// service runs a binary the image has.
func TestDockerfileHealthcheckProbe(t *testing.T) {
	src := readDeployFile(t, "Dockerfile")
	code, ok := heredoc(src, "/tmp/healthcheck.go")
	if !ok {
		t.Fatal("Dockerfile: no COPY heredoc to /tmp/healthcheck.go")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "healthcheck.go"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "vet", "healthcheck.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go vet of the Dockerfile's healthcheck program: %v\n%s", err, out)
	}

	p, err := loadCompose(t, readDeployFile(t, "compose.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	files := finalFiles(src)
	for _, name := range append([]string{"migrate"}, roles...) {
		s, err := p.GetService(name)
		if err != nil || s.HealthCheck == nil || len(s.HealthCheck.Test) < 2 {
			continue
		}
		if s.HealthCheck.Test[0] == "CMD" && !slices.Contains(files, s.HealthCheck.Test[1]) {
			t.Errorf("compose: %s healthcheck runs %s, which the image does not have (it has %v)", name, s.HealthCheck.Test[1], files)
		}
	}
}
