# The package (installer/package.sh runs cpack): a .deb for Debian 12 whose
# Depends dpkg-shlibdeps computes from the programs, plus what it cannot see
# (the demo's corpus, Qt's platform and SVG plugins), and a .tar.gz of the
# same tree. Everything installs under /usr (the presets set the prefix, so
# the systemd unit names /usr/bin/crowdtrain-worker).
set(CPACK_PACKAGE_NAME crowdtrain)
set(CPACK_PACKAGE_VENDOR "The Crowdtrain developers")
set(CPACK_PACKAGE_CONTACT "The Crowdtrain developers <crowdtrain@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "lend your GPU to public language-model training")
set(CPACK_PACKAGE_HOMEPAGE_URL "https://github.com/crowdtrain/crowdtrain")
set(CPACK_GENERATOR DEB TGZ)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_FILE_NAME "crowdtrain_${PROJECT_VERSION}_amd64")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "fortunes, qt6-qpa-plugins, libqt6svg6")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "xvfb")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# The synopsis is CPACK_PACKAGE_DESCRIPTION_SUMMARY; this is the long part.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "Crowdtrain lets volunteers donate GPU time to public training projects, such
as a GPT-2-style language model: install, click to join a project, and watch
the model learn, with live loss curves, contribution statistics and the
project's checkpoints, which can be downloaded and tried.
.
Training lives beside its volunteer: a busy-share governor, a weekly
schedule, and pauses on battery, on heat, while the computer is in use or
while listed programs run. Project hosts run a coordinator that turns many
part-time GPUs into steady progress with DiLoCo rounds over CurveZMQ.")
include(CPack)
