# QCustomPlot from Debian 12's Qt 6 build: libqcustomplot-dev (the header,
# /usr/include/qcustomplot.h) and libqcustomplot2.1-qt6 (the library,
# libQCustomPlotQt6.so.2.1), both 2.1.0+dfsg1-3.1. Debian's header already
# declares QCP as a real Q_NAMESPACE with Q_ENUM_NS/Q_FLAG_NS (upstream's
# 2.1.0 fakes a class for moc, which moc on Qt >= 6.4 rejects), so it works
# with our code unchanged. The package's Depends on the library comes from
# dpkg-shlibdeps (cmake/CrowdtrainPackage.cmake; installer/package-test.sh
# checks it).
# The package ships no version file: the header says which release it is.
find_package(QCustomPlotQt6 CONFIG QUIET)
if(NOT TARGET QCustomPlotQt6::QCustomPlotQt6)
    message(FATAL_ERROR "QCustomPlot for Qt 6 not found: install libqcustomplot-dev and libqcustomplot2.1-qt6 "
                        "(installer/install-deps.sh)")
endif()
get_target_property(_qcp_include QCustomPlotQt6::QCustomPlotQt6 INTERFACE_INCLUDE_DIRECTORIES)
file(STRINGS "${_qcp_include}/qcustomplot.h" _qcp_version REGEX "^#define QCUSTOMPLOT_VERSION_STR ")
string(REGEX MATCH "[0-9.]+" _qcp_version "${_qcp_version}")
if(_qcp_version VERSION_LESS 2.1)
    message(FATAL_ERROR "QCustomPlot ${_qcp_version} in ${_qcp_include} is too old: 2.1 or newer is needed")
endif()
message(STATUS "QCustomPlot ${_qcp_version} (Debian's Qt 6 build)")

# The name the rest of the build links to.
add_library(qcustomplot INTERFACE)
target_link_libraries(qcustomplot INTERFACE QCustomPlotQt6::QCustomPlotQt6)
