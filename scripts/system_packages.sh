#!/usr/bin/env bash
# Install the Debian packages qsa needs when they are missing (as root), or print the command.
set -euo pipefail
PACKAGES=(espeak-ng sox libportaudio2 pulseaudio libasound2-plugins alsa-utils libsndfile1
  # real speech and recorded noise for `qsa data real` (Debian main; licences in docs/data.md)
  asterisk-core-sounds-en-g722 asterisk-core-sounds-es-g722 asterisk-core-sounds-fr-g722
  asterisk-core-sounds-it-g722 fillets-ng-data-cs fillets-ng-data-nl openttd-opensfx
  sonic-pi-samples klettres-data ktuberling-data
  # `qsa export --target c`: the Cortex-M build and its emulated run
  gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm
  # the English-text LM corpus (`linuxdoc`: the kernel documentation's text sources)
  linux-doc-6.1)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "qsa setup: missing system packages ${missing[*]} and no apt-get; install them with your package manager" >&2
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  echo "qsa setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null
  }
else
  echo "qsa setup: missing system packages; run:  sudo apt-get install -y ${missing[*]}" >&2
fi
