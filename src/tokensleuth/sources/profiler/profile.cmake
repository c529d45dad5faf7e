# tokensleuth's profiler as an extra target of llama.cpp's own build: included at the end of
# every project() (CMAKE_PROJECT_INCLUDE); it adds the target once, in llama.cpp's top-level
# project, linked to the llama library the build makes (resolved when CMake generates).
if(NOT TARGET tokensleuth-profile AND PROJECT_NAME STREQUAL "llama.cpp")
    add_executable(tokensleuth-profile "${CMAKE_CURRENT_LIST_DIR}/profile.cpp")
    target_link_libraries(tokensleuth-profile PRIVATE llama)
    target_compile_features(tokensleuth-profile PRIVATE cxx_std_17)
    if(TOKENSLEUTH_PROFILE_DEFS)
        target_compile_definitions(tokensleuth-profile PRIVATE ${TOKENSLEUTH_PROFILE_DEFS})
    endif()
    set_target_properties(tokensleuth-profile PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
endif()
