# Build policy in one place: every target of ours links crowdtrain::policy.
# Third-party code (QCustomPlot) does not, so -Werror stays on our code only.
add_library(crowdtrain_policy INTERFACE)
add_library(crowdtrain::policy ALIAS crowdtrain_policy)

target_compile_features(crowdtrain_policy INTERFACE cxx_std_20)
set(CMAKE_CXX_EXTENSIONS OFF)
target_compile_options(crowdtrain_policy INTERFACE -Wall -Wextra)
# Warnings are errors in developer and CI builds (the dev, asan and ci
# presets), never in the build a user runs (release, the package): a newer or
# older compiler that adds a warning must not stop a volunteer's build. The ci
# preset is the release build plus this, so CI fails whenever a user's build
# would, and on every warning besides.
option(CROWDTRAIN_WERROR "Treat warnings in Crowdtrain's own code as errors" OFF)
if(CROWDTRAIN_WERROR)
    target_compile_options(crowdtrain_policy INTERFACE -Werror -Wno-error=deprecated-declarations)
endif()
# GCC 12 at -O3 (the release presets) reports `"text" + std::string` as an
# overlapping memcpy: a -Wrestrict false positive (GCC bug 105651, fixed in 13).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(crowdtrain_policy INTERFACE -Wno-restrict)
endif()
target_compile_definitions(crowdtrain_policy INTERFACE
    QT_NO_CAST_FROM_ASCII
    QT_NO_CAST_TO_ASCII
    QT_NO_URL_CAST_FROM_STRING
    QT_NO_CAST_FROM_BYTEARRAY
    QT_NO_NARROWING_CONVERSIONS_IN_CONNECT
    QT_NO_CONTEXTLESS_CONNECT
    QT_USE_QSTRINGBUILDER
    QT_STRICT_ITERATORS)

# The asan preset sets CROWDTRAIN_SANITIZE=ON: AddressSanitizer + UBSan.
option(CROWDTRAIN_SANITIZE "Build with AddressSanitizer and UBSan" OFF)
if(CROWDTRAIN_SANITIZE)
    target_compile_options(crowdtrain_policy INTERFACE
        -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
        # Debug keeps Qt 6's inline functions out of line; the linker exports
        # them from a test executable when a library it loads references the
        # same name, and Debian's libtorch 1.13 loads Qt 5 (through OpenCV),
        # whose QByteArray::append(const char*) then bound to Qt 6's: a crash
        # in Qt 5's static initialisers (tst_coordinator).
        -fvisibility-inlines-hidden)
    target_link_options(crowdtrain_policy INTERFACE -fsanitize=address,undefined)
endif()
