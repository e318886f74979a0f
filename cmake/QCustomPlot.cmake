# Builds QCustomPlot against Qt 6 from Debian's (pristine upstream) source,
# fetched by installer/fetch-qcustomplot.sh. Debian ships it for Qt 5 only.
#
# 2.1.0 fakes a class named QCP during moc runs so that the QCP namespace gets
# a staticMetaObject; moc on Qt >= 6.4 rejects that. At configure time we turn
# it into a real Q_NAMESPACE with Q_ENUM_NS/Q_FLAG_NS (what 2.1.1 does
# upstream) and build the patched copy. Already-fixed sources pass unchanged.
set(CROWDTRAIN_QCUSTOMPLOT_SOURCE "/opt/crowdtrain-deps/qcustomplot" CACHE PATH
    "Folder holding qcustomplot.h and qcustomplot.cpp (installer/fetch-qcustomplot.sh)")

set(_qcp_src "${CROWDTRAIN_QCUSTOMPLOT_SOURCE}")
if(NOT EXISTS "${_qcp_src}/qcustomplot.h" OR NOT EXISTS "${_qcp_src}/qcustomplot.cpp")
    message(FATAL_ERROR "QCustomPlot source not found in ${_qcp_src}; run installer/install-deps.sh "
                        "or set CROWDTRAIN_QCUSTOMPLOT_SOURCE")
endif()

set(_qcp_out "${CMAKE_BINARY_DIR}/third_party/qcustomplot")
file(READ "${_qcp_src}/qcustomplot.h" _qcp_header)

string(FIND "${_qcp_header}" "class QCP { // when in moc-run" _qcp_fake_class)
if(NOT _qcp_fake_class EQUAL -1)
    # The fake class's Q_ENUMS/Q_FLAGS list names what the namespace exposes.
    string(REGEX MATCH "#ifndef Q_MOC_RUN\nnamespace QCP {\n#else\nclass QCP {[^\n]*\n(.*)public:\n#endif\n"
           _qcp_block "${_qcp_header}")
    if(_qcp_block STREQUAL "")
        message(FATAL_ERROR "QCustomPlot: unexpected layout of the QCP fake class in ${_qcp_src}")
    endif()
    string(REGEX MATCHALL "Q_(ENUMS|FLAGS)\\(([A-Za-z]+)\\)" _qcp_decls "${CMAKE_MATCH_1}")
    set(_qcp_ns_decls "")
    foreach(_decl IN LISTS _qcp_decls)
        string(REGEX REPLACE "Q_ENUMS\\(([A-Za-z]+)\\)" "Q_ENUM_NS(\\1)" _decl "${_decl}")
        string(REGEX REPLACE "Q_FLAGS\\(([A-Za-z]+)\\)" "Q_FLAG_NS(\\1)" _decl "${_decl}")
        string(APPEND _qcp_ns_decls "  ${_decl}\n")
    endforeach()
    string(REPLACE "${_qcp_block}" "namespace QCP {\n  Q_NAMESPACE\n" _qcp_header "${_qcp_header}")
    # The link to the fake class's meta object is now Q_NAMESPACE's job.
    string(REGEX REPLACE "\nextern const QMetaObject staticMetaObject;[^\n]*\n" "\n" _qcp_header "${_qcp_header}")
    string(REPLACE "} // end of namespace QCP" "${_qcp_ns_decls}} // end of namespace QCP"
           _qcp_header "${_qcp_header}")
    # Q_ENUM_NS registers the meta types; declaring them again is an error.
    string(REGEX REPLACE "Q_DECLARE_METATYPE\\(QCP::[A-Za-z]+\\)\n" "" _qcp_header "${_qcp_header}")
    message(STATUS "QCustomPlot: QCP fake class turned into a Q_NAMESPACE for Qt 6")
endif()

# Write through a staging file so an unchanged header keeps its timestamp.
file(WRITE "${_qcp_out}/qcustomplot.h.staged" "${_qcp_header}")
configure_file("${_qcp_out}/qcustomplot.h.staged" "${_qcp_out}/qcustomplot.h" COPYONLY)
configure_file("${_qcp_src}/qcustomplot.cpp" "${_qcp_out}/qcustomplot.cpp" COPYONLY)

add_library(qcustomplot STATIC "${_qcp_out}/qcustomplot.h" "${_qcp_out}/qcustomplot.cpp")
set_target_properties(qcustomplot PROPERTIES AUTOMOC ON POSITION_INDEPENDENT_CODE ON)
target_include_directories(qcustomplot SYSTEM PUBLIC "${_qcp_out}")
target_link_libraries(qcustomplot PUBLIC Qt6::Widgets Qt6::PrintSupport)
target_compile_options(qcustomplot PRIVATE -w)
