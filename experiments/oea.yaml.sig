{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI5NzJlOWNmM2RmZmEwNjI5MTkyNWNkZjBiYTVkNDk1YjI2NTRhNWFkZDQwM2U5MDcyMzcyNzI3NjJiNzgyNDRlIn0sIm5hbWUiOiJvZWEueWFtbCJ9XX0=",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "4qxdBck84ZgIcJQQbNo2KOwWiNRvl5jRK7zNAZaJ0JJus91Csh51m7KSdNFlxQTgnIwMQh67UA0LTWgF+GphAQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
