//! Container images without a registry, for real nodes: OCI image layout tarballs FROM scratch holding the
//! binaries `hack/install-testenv.sh nodes` builds, tagged exactly as `kubeadm config images list` names
//! them for the release, which a node's containerd imports (`ctr -n k8s.io images import`) before the
//! kubelet asks for them. No registry is reachable here, and none is needed: an image the kubelet finds
//! in containerd's store is not pulled.
//!
//! An image is one uncompressed layer: the binaries (static Go builds) under `/usr/local/bin` (CoreDNS and
//! pause at `/`, as their entrypoints), a `/tmp`, and for kube-proxy the packet filter programs it runs
//! (`nft`, iptables through `xtables-nft-multi` and its extensions) with the shared libraries `ldd` names.
//! Each image holds the build of the release its tag names: kube-apiserver, kube-controller-manager,
//! kube-scheduler and kube-proxy of that Kubernetes release, CoreDNS of that version, and for etcd the
//! build of the minor kubeadm's tag names (kubeadm 1.34 names `3.6.5-0`, 1.37 `3.7.0-0`; the builds are
//! the newest 3.6 and 3.7 the proxy serves).

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use ring::digest::{Context, SHA256};
use serde_json::json;

use crate::Error;
use crate::binaries;

/// `PATH` in every image: where kubeadm's manifests find `kube-apiserver`, `etcd`, ... by name.
const PATH: &str = "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One image: what it is called and what its single layer holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// The reference kubeadm names, e.g. `registry.k8s.io/kube-apiserver:v1.34.4`.
    pub reference: String,
    /// Regular files: where on this machine, where in the image (absolute), and the mode.
    pub files: Vec<(PathBuf, String, u32)>,
    /// Symbolic links: where in the image, and what they point to.
    pub links: Vec<(String, String)>,
    /// The image's entrypoint; empty when every user names the command (kubeadm's manifests do).
    pub entrypoint: Vec<String>,
}

impl Image {
    fn new(reference: &str) -> Self {
        Self {
            reference: reference.to_owned(),
            files: Vec::new(),
            links: Vec::new(),
            entrypoint: Vec::new(),
        }
    }

    /// An image of one static binary at `at`, its entrypoint: e.g. Cluster API's core manager (`/manager`)
    /// tagged as its components name it.
    pub fn of_binary(reference: &str, source: PathBuf, at: &str) -> Self {
        let mut image = Self::new(reference).with_binary(source, at);
        image.entrypoint = vec![at.to_owned()];
        image
    }

    fn with_binary(mut self, source: PathBuf, at: &str) -> Self {
        self.files.push((source, at.to_owned(), 0o755));
        self
    }

    /// The repository's last path element: `kube-apiserver`, `coredns`, `pause`, `etcd`.
    pub fn component(&self) -> &str {
        let repository = self
            .reference
            .rsplit_once(':')
            .map_or(self.reference.as_str(), |(r, _)| r);
        repository.rsplit('/').next().unwrap_or(repository)
    }

    /// The tag, e.g. `v1.34.4` or `3.6.5-0`.
    pub fn tag(&self) -> &str {
        self.reference.rsplit_once(':').map_or("", |(_, t)| t)
    }

    /// Writes the image as an OCI image layout tarball to `out` (through a temporary file beside it, so a
    /// half-written tarball is never taken for an image).
    pub fn write_layout(&self, out: &Path) -> Result<(), Error> {
        // Of this writer alone: test processes side by side may write the same image at once; the last
        // rename wins, with the same bytes.
        static WRITES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = out.with_extension(format!("tmp.{}.{n}", std::process::id()));
        let io_err = |what: String| move |source| Error::Io { what, source };
        let result = self.write_layout_to(&tmp);
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, out).map_err(io_err(format!("rename {}", tmp.display())))
    }

    fn write_layout_to(&self, out: &Path) -> Result<(), Error> {
        let io_err = |what: &str| {
            let what = format!("{what} of image {}", self.reference);
            move |source| Error::Io { what, source }
        };
        // The layer first, to a file of its own: its digest names it in the config and manifest.
        let layer_path = PathBuf::from(format!("{}.layer", out.display()));
        let layer = {
            let file = std::fs::File::create(&layer_path).map_err(io_err("create the layer"))?;
            let mut builder = tar::Builder::new(Digesting::new(io::BufWriter::new(file)));
            self.append_layer(&mut builder)
                .map_err(io_err("write the layer"))?;
            let digesting = builder.into_inner().map_err(io_err("finish the layer"))?;
            digesting.finish().map_err(io_err("flush the layer"))?
        };
        let config = serde_json::to_vec(&json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Env": [PATH],
                "Entrypoint": if self.entrypoint.is_empty() { serde_json::Value::Null } else { json!(self.entrypoint) },
            },
            "rootfs": { "type": "layers", "diff_ids": [layer.digest()] },
            "history": [{ "created_by": "testenv::images", "comment": "binaries built from Go modules" }],
        }))
        .expect("JSON");
        let config_blob = Blob::of(&config);
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_blob.digest(),
                "size": config_blob.size,
            },
            "layers": [{
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer.digest(),
                "size": layer.size,
            }],
        }))
        .expect("JSON");
        let manifest_blob = Blob::of(&manifest);
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_blob.digest(),
                "size": manifest_blob.size,
                "annotations": {
                    // What `ctr images import` names the image; the second is the OCI tag.
                    "io.containerd.image.name": self.reference,
                    "org.opencontainers.image.ref.name": self.tag(),
                },
            }],
        }))
        .expect("JSON");

        let file = std::fs::File::create(out).map_err(io_err("create the tarball"))?;
        let mut outer = tar::Builder::new(io::BufWriter::new(file));
        let written = (|| -> io::Result<()> {
            append_bytes(
                &mut outer,
                "oci-layout",
                br#"{"imageLayoutVersion":"1.0.0"}"#,
            )?;
            append_bytes(&mut outer, "index.json", &index)?;
            append_bytes(&mut outer, &manifest_blob.path(), &manifest)?;
            append_bytes(&mut outer, &config_blob.path(), &config)?;
            let mut header = tar::Header::new_gnu();
            header.set_size(layer.size);
            header.set_mode(0o644);
            header.set_mtime(0);
            header.set_entry_type(tar::EntryType::Regular);
            outer.append_data(&mut header, layer.path(), std::fs::File::open(&layer_path)?)?;
            outer.into_inner()?.flush()
        })();
        let _ = std::fs::remove_file(&layer_path);
        written.map_err(io_err("write the tarball"))
    }

    fn append_layer<W: Write>(&self, builder: &mut tar::Builder<W>) -> io::Result<()> {
        // Every folder a file or link sits in, parents first, and /tmp as every image has one.
        let mut dirs = BTreeSet::from(["tmp".to_owned()]);
        for at in self
            .files
            .iter()
            .map(|(_, at, _)| at)
            .chain(self.links.iter().map(|(at, _)| at))
        {
            let mut parent = Path::new(at.trim_start_matches('/')).parent();
            while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
                dirs.insert(dir.display().to_string());
                parent = dir.parent();
            }
        }
        for dir in &dirs {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(if dir == "tmp" { 0o1777 } else { 0o755 });
            header.set_size(0);
            header.set_mtime(0);
            builder.append_data(&mut header, format!("{dir}/"), io::empty())?;
        }
        for (source, at, mode) in &self.files {
            let file = std::fs::File::open(source)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", source.display())))?;
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(file.metadata()?.len());
            header.set_mode(*mode);
            header.set_mtime(0);
            builder.append_data(&mut header, at.trim_start_matches('/'), file)?;
        }
        for (at, target) in &self.links {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            header.set_mode(0o777);
            header.set_mtime(0);
            builder.append_link(&mut header, at.trim_start_matches('/'), target)?;
        }
        Ok(())
    }

    /// A key that changes when what goes into the image does: the reference, each file's content (not
    /// its modification time, which `hack/install-testenv.sh` touches on every run) and place, each link.
    fn cache_key(&self) -> String {
        let mut context = Context::new(&SHA256);
        context.update(self.reference.as_bytes());
        for (source, at, mode) in &self.files {
            context.update(format!("\n{at} {mode:o} ").as_bytes());
            let mut digesting = Digesting::new(io::sink());
            match std::fs::File::open(source).and_then(|mut f| io::copy(&mut f, &mut digesting)) {
                Ok(_) => context.update(digesting.context.finish().as_ref()),
                // Writing the layer names the missing file.
                Err(_) => context.update(source.display().to_string().as_bytes()),
            }
        }
        for (at, target) in &self.links {
            context.update(format!("\n{at} -> {target}").as_bytes());
        }
        context.update(format!("\n{:?}", self.entrypoint).as_bytes());
        hex(context.finish().as_ref())[..12].to_owned()
    }
}

fn append_bytes<W: Write>(
    builder: &mut tar::Builder<W>,
    path: &str,
    data: &[u8],
) -> io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    builder.append_data(&mut header, path, data)
}

/// A content-addressed blob: its SHA-256 and size.
struct Blob {
    sha256: String,
    size: u64,
}

impl Blob {
    fn of(data: &[u8]) -> Self {
        Self {
            sha256: hex(ring::digest::digest(&SHA256, data).as_ref()),
            size: data.len() as u64,
        }
    }

    fn digest(&self) -> String {
        format!("sha256:{}", self.sha256)
    }

    fn path(&self) -> String {
        format!("blobs/sha256/{}", self.sha256)
    }
}

/// A writer that hashes what it writes, so the layer's digest comes without reading it again.
struct Digesting<W> {
    inner: W,
    context: Context,
    size: u64,
}

impl<W: Write> Digesting<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            context: Context::new(&SHA256),
            size: 0,
        }
    }

    fn finish(mut self) -> io::Result<Blob> {
        self.inner.flush()?;
        Ok(Blob {
            sha256: hex(self.context.finish().as_ref()),
            size: self.size,
        })
    }
}

impl<W: Write> Write for Digesting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.context.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The images `kubeadm` (the current release's) lists for Kubernetes `version`, as `kubeadm config images
/// list` prints them: the control-plane components, kube-proxy, CoreDNS, pause and etcd.
pub fn kubeadm_image_list(kubeadm: &Path, version: &str) -> Result<Vec<String>, Error> {
    let output = Command::new(kubeadm)
        .args(["config", "images", "list", "--kubernetes-version", version])
        .output()
        .map_err(|source| Error::Io {
            what: format!("run {} config images list", kubeadm.display()),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::Io {
            what: format!(
                "kubeadm config images list --kubernetes-version {version}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
            source: io::Error::other("kubeadm failed"),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The images a real node of the Kubernetes release `version` (`v1.36.3`) finds in its containerd, each made
/// of the binaries built for it: what kubeadm of that release lists for it (the control-plane components,
/// kube-proxy, CoreDNS, pause and etcd, under the tags it names), and the add-ons a cluster upgraded to
/// this release still runs, as a registry would hold them: kube-proxy of the releases next to it (Cluster
/// API upgrades one minor at a time, and the kube-proxy DaemonSet follows the control plane's version while
/// older workers still run) and CoreDNS of every older release (its Deployment keeps the tag of the release
/// the cluster was created at until `dns.imageTag` moves it). Those add-ons only where built (`hack/
/// install-testenv.sh nodes node-releases`); fails naming any binary of the release's own list that is
/// missing.
pub fn node_images(version: &str) -> Result<Vec<Image>, Error> {
    let kubeadm = binaries::kubernetes_binary("kubeadm", version)?;
    let mut images = kubeadm_image_list(&kubeadm, version)?
        .iter()
        .map(|reference| image_for(reference))
        .collect::<Result<Vec<_>, _>>()?;
    let releases = binaries::kubernetes_releases();
    let Some(own) = releases
        .iter()
        .position(|r| r.trim_start_matches('v') == version.trim_start_matches('v'))
    else {
        return Ok(images);
    };
    let repository_of = |component: &str| {
        images
            .iter()
            .find(|i| i.component() == component)
            .and_then(|i| i.reference.rsplit_once(':'))
            .map(|(repository, _)| repository.to_owned())
    };
    let mut add_ons = Vec::new();
    if let Some(kube_proxy) = repository_of("kube-proxy") {
        for neighbour in [own.checked_sub(1), Some(own + 1)].into_iter().flatten() {
            if let Some(release) = releases.get(neighbour) {
                add_ons.push(format!("{kube_proxy}:{release}"));
            }
        }
    }
    if let Some(coredns) = repository_of("coredns") {
        let tags = binaries::coredns_releases();
        for tag in tags.iter().take(own) {
            add_ons.push(format!("{coredns}:{tag}"));
        }
    }
    for reference in add_ons {
        if images.iter().any(|i| i.reference == reference) {
            continue;
        }
        match image_for(&reference) {
            Ok(image) => images.push(image),
            // A node of the release that needs it cannot boot without that build either.
            Err(Error::MissingBinary { name, .. }) => {
                tracing::debug!(%name, "an add-on of another release is not built; not carried");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(images)
}

/// The image `reference` names, made of this machine's builds of the release its tag names.
fn image_for(reference: &str) -> Result<Image, Error> {
    let image = Image::new(reference);
    let tag = image.tag().to_owned();
    let image = match image.component() {
        "kube-apiserver" => image.with_binary(
            binaries::kubernetes_binary("kube-apiserver", &tag)?,
            "/usr/local/bin/kube-apiserver",
        ),
        "kube-controller-manager" => image.with_binary(
            binaries::node_component_of("kube-controller-manager", &tag)?,
            "/usr/local/bin/kube-controller-manager",
        ),
        "kube-scheduler" => image.with_binary(
            binaries::node_component_of("kube-scheduler", &tag)?,
            "/usr/local/bin/kube-scheduler",
        ),
        "kube-proxy" => with_packet_filters(image.with_binary(
            binaries::node_component_of("kube-proxy", &tag)?,
            "/usr/local/bin/kube-proxy",
        ))?,
        "etcd" => image
            .with_binary(binaries::etcd_binary("etcd", &tag)?, "/usr/local/bin/etcd")
            .with_binary(
                binaries::etcd_binary("etcdctl", &tag)?,
                "/usr/local/bin/etcdctl",
            )
            .with_binary(
                binaries::etcd_binary("etcdutl", &tag)?,
                "/usr/local/bin/etcdutl",
            ),
        "coredns" => {
            let mut image = image.with_binary(binaries::coredns(&tag)?, "/coredns");
            image.entrypoint = vec!["/coredns".into()];
            image
        }
        "pause" => {
            let mut image = image.with_binary(binaries::node_component("pause")?, "/pause");
            image.entrypoint = vec!["/pause".into()];
            image
        }
        other => {
            return Err(Error::MissingBinary {
                name: format!("the image {reference}"),
                hint: format!("kubeadm names an image of {other}, which testenv does not build"),
            });
        }
    };
    Ok(image)
}

/// What kube-proxy runs besides itself: `nft` (nftables mode) and iptables, ip6tables and their
/// `-save`/`-restore` (iptables mode), Debian's builds with the iptables extensions and every shared library
/// they load, and the protocol and service names iptables resolves.
fn with_packet_filters(mut image: Image) -> Result<Image, Error> {
    let nft = Path::new("/usr/sbin/nft");
    let multi = Path::new("/usr/sbin/xtables-nft-multi");
    let extensions = Path::new("/usr/lib/x86_64-linux-gnu/xtables");
    for needed in [nft, multi, extensions] {
        if !needed.exists() {
            return Err(Error::MissingBinary {
                name: needed.display().to_string(),
                hint: "kube-proxy's image carries Debian's nftables and iptables: run \
                       `hack/install-testenv.sh nodes`"
                    .into(),
            });
        }
    }
    let mut programs = vec![nft.to_owned(), multi.to_owned()];
    let mut plugins: Vec<PathBuf> = std::fs::read_dir(extensions)
        .map_err(|source| Error::Io {
            what: format!("read {}", extensions.display()),
            source,
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "so"))
        .collect();
    plugins.sort();
    for file in programs.iter().chain(&plugins) {
        image
            .files
            .push((file.clone(), file.display().to_string(), 0o755));
    }
    programs.extend(plugins);
    let mut libraries = BTreeSet::new();
    for program in &programs {
        libraries.extend(shared_libraries(program)?);
    }
    for library in libraries {
        // Under the name the loader asks for; the content of what it points to.
        image
            .files
            .push((library.clone(), library.display().to_string(), 0o755));
    }
    for tool in ["iptables", "ip6tables"] {
        for suffix in ["", "-save", "-restore"] {
            image.links.push((
                format!("/usr/sbin/{tool}{suffix}"),
                "xtables-nft-multi".into(),
            ));
        }
    }
    for names in ["/etc/protocols", "/etc/services"] {
        if Path::new(names).exists() {
            image.files.push((names.into(), names.into(), 0o644));
        }
    }
    Ok(image)
}

/// The shared libraries `ldd` says `program` loads, the dynamic loader included.
fn shared_libraries(program: &Path) -> Result<Vec<PathBuf>, Error> {
    let output = Command::new("ldd")
        .arg(program)
        .output()
        .map_err(|source| Error::Io {
            what: format!("ldd {}", program.display()),
            source,
        })?;
    Ok(parse_ldd(&String::from_utf8_lossy(&output.stdout)))
}

/// The absolute paths of `ldd`'s answer: `libx.so.1 => /lib/.../libx.so.1 (0x...)` and
/// `/lib64/ld-linux-x86-64.so.2 (0x...)`; `linux-vdso.so.1` has no file.
fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = line.split_once("=>").map_or(line, |(_, p)| p.trim());
            let path = path.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Writes each of `images` as a tarball under the cache (`<cache root>/images/`), once per content; returns
/// the tarballs, in order. A tarball already written for the same binaries is reused.
pub fn tarballs(images: &[Image]) -> Result<Vec<PathBuf>, Error> {
    let dir = binaries::cache_root().join("images");
    std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
        what: format!("create {}", dir.display()),
        source,
    })?;
    images
        .iter()
        .map(|image| {
            let name = format!(
                "{}-{}-{}.tar",
                image.component(),
                image.tag(),
                image.cache_key()
            );
            let path = dir.join(&name);
            if !path.exists() {
                image.write_layout(&path)?;
                // Earlier builds of this image are not used again.
                let prefix = format!("{}-{}-", image.component(), image.tag());
                for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                    let other = entry.file_name().to_string_lossy().into_owned();
                    if other != name && other.starts_with(&prefix) && other.ends_with(".tar") {
                        let _ = std::fs::remove_file(entry.path());
                    }
                }
            }
            Ok(path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_answers_name_files_and_the_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                    \tlibnftables.so.1 => /lib/x86_64-linux-gnu/libnftables.so.1 (0x00007f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(text),
            [
                "/lib/x86_64-linux-gnu/libnftables.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn a_reference_names_its_component_and_tag() {
        let image = Image::new("registry.k8s.io/coredns/coredns:v1.12.1");
        assert_eq!((image.component(), image.tag()), ("coredns", "v1.12.1"));
        let image = Image::new("registry.k8s.io/etcd:3.6.5-0");
        assert_eq!((image.component(), image.tag()), ("etcd", "3.6.5-0"));
    }

    /// The layout is what the OCI image spec says, read back as a consumer would: the index names the
    /// manifest by digest and carries the reference; the manifest names config and layer by the digests of
    /// their bytes; the layer holds the files with their modes, the folders above them and /tmp.
    #[test]
    fn a_layout_tarball_is_content_addressed_and_holds_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("program");
        std::fs::write(&program, b"#!/bin/sh\necho hello\n").unwrap();
        let mut image = Image::new("registry.k8s.io/pause:3.10.1").with_binary(program, "/pause");
        image
            .links
            .push(("/usr/sbin/other".into(), "../../pause".into()));
        image.entrypoint = vec!["/pause".into()];
        let out = dir.path().join("pause.tar");
        image.write_layout(&out).unwrap();

        let mut entries = std::collections::BTreeMap::new();
        let mut archive = tar::Archive::new(std::fs::File::open(&out).unwrap());
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().display().to_string();
            let mut data = Vec::new();
            io::Read::read_to_end(&mut entry, &mut data).unwrap();
            entries.insert(path, data);
        }
        let json = |path: &str| -> serde_json::Value {
            serde_json::from_slice(&entries[path]).unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        let blob = |digest: &serde_json::Value| -> &Vec<u8> {
            let hex = digest.as_str().unwrap().strip_prefix("sha256:").unwrap();
            let data = &entries[&format!("blobs/sha256/{hex}")];
            assert_eq!(Blob::of(data).sha256, hex, "a blob's name is its digest");
            data
        };
        assert_eq!(json("oci-layout")["imageLayoutVersion"], "1.0.0");
        let index = json("index.json");
        let entry = &index["manifests"][0];
        assert_eq!(
            entry["annotations"]["io.containerd.image.name"],
            "registry.k8s.io/pause:3.10.1"
        );
        let manifest: serde_json::Value = serde_json::from_slice(blob(&entry["digest"])).unwrap();
        let config: serde_json::Value =
            serde_json::from_slice(blob(&manifest["config"]["digest"])).unwrap();
        assert_eq!(config["config"]["Entrypoint"], json!(["/pause"]));
        assert_eq!(
            config["rootfs"]["diff_ids"][0],
            manifest["layers"][0]["digest"]
        );
        let layer = blob(&manifest["layers"][0]["digest"]);
        let mut found = Vec::new();
        for entry in tar::Archive::new(layer.as_slice()).entries().unwrap() {
            let entry = entry.unwrap();
            let header = entry.header();
            found.push(format!(
                "{} {:o} {:?}",
                entry.path().unwrap().display(),
                header.mode().unwrap(),
                header.link_name().unwrap().map(|l| l.display().to_string())
            ));
        }
        assert_eq!(
            found,
            [
                "tmp/ 1777 None",
                "usr/ 755 None",
                "usr/sbin/ 755 None",
                "pause 755 None",
                "usr/sbin/other 777 Some(\"../../pause\")",
            ]
        );
        // The same content, the same key; another file, another.
        assert_eq!(image.cache_key(), image.clone().cache_key());
        let mut other = image.clone();
        other.reference = "registry.k8s.io/pause:3.10".into();
        assert_ne!(image.cache_key(), other.cache_key());
    }
}
