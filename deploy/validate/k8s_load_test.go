package validate

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kinds maps apiVersion/kind to the typed struct a document decodes into. A kind
// not listed here is a problem: add it deliberately, with its checks.
var kinds = map[string]func() object{
	"v1/Namespace":                       func() object { return new(corev1.Namespace) },
	"v1/ConfigMap":                       func() object { return new(corev1.ConfigMap) },
	"v1/Secret":                          func() object { return new(corev1.Secret) },
	"v1/Service":                         func() object { return new(corev1.Service) },
	"apps/v1/Deployment":                 func() object { return new(appsv1.Deployment) },
	"apps/v1/StatefulSet":                func() object { return new(appsv1.StatefulSet) },
	"batch/v1/Job":                       func() object { return new(batchv1.Job) },
	"policy/v1/PodDisruptionBudget":      func() object { return new(policyv1.PodDisruptionBudget) },
	"networking.k8s.io/v1/NetworkPolicy": func() object { return new(networkingv1.NetworkPolicy) },
}

// object is what every typed Kubernetes object offers through its ObjectMeta.
type object interface {
	GetName() string
	GetNamespace() string
	GetLabels() map[string]string
}

// kustomization is the part of kustomize's Kustomization these manifests use.
// It is decoded strictly too: a field outside it is a problem until added here.
type kustomization struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Namespace  string           `json:"namespace,omitempty"`
	Resources  []string         `json:"resources,omitempty"`
	Images     []kustomizeImage `json:"images,omitempty"`
}

type kustomizeImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// manifest is one decoded document.
type manifest struct {
	file string // slash path under deploy/k8s
	kind string // apiVersion/kind, a key of kinds
	obj  object
}

func (m manifest) String() string { return m.file + ": " + m.kind + " " + m.obj.GetName() }

// bundle is one kustomization and the objects of the files it lists.
type bundle struct {
	dir  string // slash path under deploy/k8s, "." for the top
	kust kustomization
	objs []manifest
}

// loadBundles decodes every kustomization under fsys and the files it lists, and
// reports files that are not listed, listed files that do not exist, and every
// document that does not decode strictly into its type.
func loadBundles(fsys fs.FS) ([]*bundle, problems, error) {
	var probs problems
	yamlFiles := map[string][]string{} // dir -> manifest files in it
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := path.Ext(p); ext == ".yaml" || ext == ".yml" {
			yamlFiles[path.Dir(p)] = append(yamlFiles[path.Dir(p)], p)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}

	dirs := make([]string, 0, len(yamlFiles))
	for dir := range yamlFiles {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)

	var bundles []*bundle
	for _, dir := range dirs {
		kfile := path.Join(dir, "kustomization.yaml")
		data, err := fs.ReadFile(fsys, kfile)
		if errors.Is(err, fs.ErrNotExist) {
			probs.addf("%s: manifests without a kustomization.yaml", dir)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		b := &bundle{dir: dir}
		if err := decodeStrict(data, &b.kust); err != nil {
			probs.addf("%s: %v", kfile, err)
			continue
		}
		if b.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || b.kust.Kind != "Kustomization" {
			probs.addf("%s: apiVersion/kind %s/%s, want kustomize.config.k8s.io/v1beta1/Kustomization", kfile, b.kust.APIVersion, b.kust.Kind)
		}

		listed := map[string]bool{}
		for _, r := range b.kust.Resources {
			p := path.Join(dir, r)
			if listed[p] {
				probs.addf("%s: %s listed twice", kfile, r)
			}
			listed[p] = true
			info, err := fs.Stat(fsys, p)
			switch {
			case strings.HasPrefix(p, "..") || path.IsAbs(r):
				probs.addf("%s: resource %s is outside deploy/k8s", kfile, r)
			case err != nil:
				probs.addf("%s: resource %s does not exist", kfile, r)
			case info.IsDir():
				if _, err := fs.Stat(fsys, path.Join(p, "kustomization.yaml")); err != nil {
					probs.addf("%s: resource %s is a directory without a kustomization.yaml", kfile, r)
				}
			default:
				data, err := fs.ReadFile(fsys, p)
				if err != nil {
					return nil, nil, err
				}
				objs, fileProbs := decodeManifests(p, data)
				b.objs = append(b.objs, objs...)
				probs = append(probs, fileProbs...)
			}
		}
		for _, f := range yamlFiles[dir] {
			if f != kfile && !listed[f] {
				probs.addf("%s: not listed in %s", f, kfile)
			}
		}
		bundles = append(bundles, b)
	}
	return bundles, probs, nil
}

// decodeManifests strictly decodes each document of a file into the type its
// apiVersion and kind name.
func decodeManifests(file string, data []byte) ([]manifest, problems) {
	var objs []manifest
	var probs problems
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			probs.addf("%s: document %d: %v", file, i, err)
			break
		}
		var fields map[string]any
		if err := yaml.Unmarshal(doc, &fields); err != nil {
			probs.addf("%s: document %d: %v", file, i, err)
			continue
		}
		if len(fields) == 0 {
			continue // only comments
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			probs.addf("%s: document %d: %v", file, i, err)
			continue
		}
		kind := tm.APIVersion + "/" + tm.Kind
		newObj, ok := kinds[kind]
		if !ok {
			probs.addf("%s: document %d: unexpected kind %s", file, i, kind)
			continue
		}
		obj := newObj()
		if err := decodeStrict(doc, obj); err != nil {
			probs.addf("%s: document %d (%s): %v", file, i, kind, err)
			continue
		}
		if obj.GetName() == "" {
			probs.addf("%s: document %d (%s): no metadata.name", file, i, kind)
		}
		objs = append(objs, manifest{file: file, kind: kind, obj: obj})
	}
	return objs, probs
}

// decodeStrict decodes YAML into v the way the API server's strict field
// validation does: duplicate keys, unknown fields and fields in the wrong case
// are all errors. (sigs.k8s.io/yaml's UnmarshalStrict alone goes through
// encoding/json, which matches field names case-insensitively.)
func decodeStrict(data []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// find returns the objects of a bundle with the given kind.
func (b *bundle) find(kind string) []manifest {
	var out []manifest
	for _, m := range b.objs {
		if m.kind == kind {
			out = append(out, m)
		}
	}
	return out
}

// get returns the object of a kind and name, or nil.
func (b *bundle) get(kind, name string) object {
	i := slices.IndexFunc(b.objs, func(m manifest) bool { return m.kind == kind && m.obj.GetName() == name })
	if i < 0 {
		return nil
	}
	return b.objs[i].obj
}

// podTemplate returns the pod template of a workload, or nil.
func podTemplate(o object) *corev1.PodTemplateSpec {
	switch w := o.(type) {
	case *appsv1.Deployment:
		return &w.Spec.Template
	case *appsv1.StatefulSet:
		return &w.Spec.Template
	case *batchv1.Job:
		return &w.Spec.Template
	}
	return nil
}
